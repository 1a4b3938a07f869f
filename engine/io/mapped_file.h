#pragma once
// A read-only memory map of a whole file. Checkpoints are mapped, not read, so a 4 GB model costs page cache,
// not a second copy in the heap, and tensors that need no conversion are used in place.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

namespace qvl {

class MappedFile {
public:
  // Throws qvl::Error naming the path when it cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

private:
  MappedFile() = default;
  std::filesystem::path path_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace qvl
