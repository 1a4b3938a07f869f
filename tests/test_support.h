#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace qvl::test {

// A fresh folder under the system temp dir, removed when the object dies.
class TempDir {
public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

private:
  std::filesystem::path path_;
};

void write_bytes(const std::filesystem::path& path, std::string_view bytes);
std::string read_bytes(const std::filesystem::path& path);
std::filesystem::path resource_dir();
// f32 tensor of standard-normal values from a fixed seed.
Tensor random_normal(Shape shape, uint32_t seed);
// max |a - b| / max |b|: an error relative to the reference b's scale (infinite where the sizes differ).
double relative_error(const std::vector<float>& a, const std::vector<float>& b);
// The message `work` throws ("accepted" when it returns). Should it run past `limit`, the process fails at once:
// a hang (a FIFO opened for reading, a parse gone quadratic) must fail the test, not stall the suite.
std::string error_within(std::chrono::seconds limit, std::function<void()> work);

}  // namespace qvl::test
