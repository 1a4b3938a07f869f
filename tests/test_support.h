#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

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

}  // namespace qvl::test
