#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/limits.h"
#include "core/error.h"
#include "io/mapped_file.h"

namespace qvl {
namespace {

// Flushes a folder's entry list, so that a rename in it survives a power cut (the file's own fsync does not cover
// the name). Best effort: some file systems refuse fsync on a folder.
void sync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The process's umask, read from /proc (setting it to read it, the only other way, races with threads creating
// files); 022 where /proc does not say.
mode_t current_umask() {
  std::FILE* status = std::fopen("/proc/self/status", "re");
  unsigned mask = 022;
  if (status) {
    char line[256];
    while (std::fgets(line, sizeof line, status))
      if (std::sscanf(line, "Umask: %o", &mask) == 1) break;
    std::fclose(status);
  }
  return mode_t(mask);
}

// The mode a replacement gets: the replaced file's, or what open(2) would give a new file.
mode_t mode_for(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return st.st_mode & 07777;
  return 0666 & ~current_umask();
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)), temp_(path_.string() + ".partial-XXXXXX") {
  fd_ = ::mkostemp(temp_.data(), O_CLOEXEC);
  if (fd_ < 0) fail(path_.string(), ": cannot create a temporary file beside it: ", std::strerror(errno));
  // mkostemp makes 0600; a written file gets the mode a plain open(2) would give it, or keeps the replaced one's.
  if (::fchmod(fd_, mode_for(path_)) != 0) give_up("cannot set the permissions", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
}

void AtomicFileWriter::give_up(const char* what, int err) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(temp_.c_str());
  fail(path_.string(), ": ", what, ": ", std::strerror(err));
}

void AtomicFileWriter::write(const void* data, std::size_t bytes) {
  if (fd_ < 0) fail(path_.string(), ": written after it was committed or abandoned");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) give_up("write failed", n < 0 ? errno : ENOSPC);
    p += n;
    bytes -= std::size_t(n);
  }
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) fail(path_.string(), ": committed after it was committed or abandoned");
  if (::fsync(fd_) != 0) give_up("flush failed", errno);
  const int closed = ::close(fd_);
  const int close_err = errno;
  fd_ = -1;
  if (closed != 0 || ::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = closed != 0 ? close_err : errno;
    ::unlink(temp_.c_str());  // nothing half-done is left beside the file
    fail(path_.string(), closed != 0 ? ": flush failed: " : ": cannot replace it: ", std::strerror(err));
  }
  sync_folder(path_.parent_path());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  AtomicFileWriter file(path);
  file.write(contents.data(), contents.size());
  file.commit();
}

void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to) {
  write_file_atomically(to, read_whole_file(from, limits::kCopiedFileBytes, "a file copied into a model folder"));
}

FileLock::FileLock(const std::filesystem::path& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) fail(path.string(), ": cannot open the lock file: ", std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    fail(path.string(), ": cannot lock: ", std::strerror(err));
  }
}

FileLock::~FileLock() { ::close(fd_); }  // closing releases the lock

}  // namespace qvl
