#pragma once
#include <filesystem>
#include <string>
#include <string_view>

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

}  // namespace qvl::test
