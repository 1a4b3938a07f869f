#pragma once
// Files that appear whole or not at all: written to a fresh temporary sibling, flushed, renamed over the final name,
// the folder flushed after the rename. A failure at any step (disk full included) removes the temporary file, and
// the file under the final name is the old one, untouched.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace qvl {

class AtomicFileWriter {
public:
  // Creates "<path>.partial-XXXXXX" with mkstemp (O_CREAT | O_EXCL): never an existing file, nor a link planted where
  // a fixed temporary name would be (writing through one once overwrote the link's target).
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();  // removes the temporary file unless committed
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t bytes);  // throws qvl::Error naming the file (and removes the temporary)
  void commit();  // flushes, renames over the final name, flushes the folder
  const std::filesystem::path& path() const { return path_; }

private:
  [[noreturn]] void give_up(const char* what, int err);
  std::filesystem::path path_;
  std::string temp_;
  int fd_ = -1;
};

void write_file_atomically(const std::filesystem::path& path, std::string_view contents);
// A copy of a model folder's small file (configs, tokenizer: at most 256 MiB), written as above; errors name both.
void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to);

// An exclusive advisory lock (flock) on `path`, created if absent, held while the object lives: processes that
// fill one cache entry take turns. Waits while another process holds it; released by the kernel if that one dies.
class FileLock {
public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

private:
  int fd_ = -1;
};

}  // namespace qvl
