#pragma once
// A read-only memory map of a whole file. Checkpoints are mapped, not read, so a 4 GB model costs page cache,
// not a second copy in the heap, and tensors that need no conversion are used in place.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace qvl {

// Throws qvl::Error unless `path` names a regular file (symbolic links followed). A folder, a FIFO or a device is
// refused by its kind before anything opens it: opening a FIFO blocks until a writer comes, reading /dev/zero never
// ends, and a folder opened as a stream fails with a message that names no path.
void check_regular_file(const std::filesystem::path& path);

// The whole of a regular file, refused by its kind as above and by its size before anything is read: over
// `max_bytes` the error names the file, its size, the limit and `what` the file is ("this JSON file", "an image").
std::string read_whole_file(const std::filesystem::path& path, std::uintmax_t max_bytes, std::string_view what);

class MappedFile {
public:
  // Throws qvl::Error naming the path when it cannot be opened or mapped, or (as read_whole_file) when it is larger
  // than `max_bytes`.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path, std::uintmax_t max_bytes = UINTMAX_MAX,
                                                std::string_view what = "a mapped file");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  // Throws qvl::Error naming the file when it was truncated (its pages then read as zeros: a SIGBUS handler maps
  // them so, where the fault once killed the process) or rewritten in place since it was mapped. A file replaced by
  // a rename, or removed, is no change: the mapping keeps the old one.
  void check_unchanged() const;
  bool changed() const;  // what check_unchanged refuses, as a flag (for files that are no model: images)
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

private:
  MappedFile() = default;
  std::filesystem::path path_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
  int64_t modified_ns_ = 0;
  int guard_slot_ = -1;
};

}  // namespace qvl
