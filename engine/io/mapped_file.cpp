#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace qvl {

void check_regular_file(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path.string(), ": cannot open: ", std::strerror(errno));
  if (S_ISREG(st.st_mode)) return;
  const char* kind = S_ISDIR(st.st_mode)                          ? "a folder"
                     : S_ISFIFO(st.st_mode)                       ? "a FIFO (named pipe)"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                  : "not a regular file";
  fail(path.string(), ": is ", kind, ", where a file is expected");
}

namespace {
// Opens a regular file for reading. O_NONBLOCK: should the path turn into a FIFO after the check, the open still
// returns (and fstat refuses it).
int open_regular_file(const std::filesystem::path& path, struct stat* st) {
  check_regular_file(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(path.string(), ": cannot open: ", std::strerror(errno));
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    ::close(fd);
    fail(path.string(), ": not a regular file");
  }
  return fd;
}
}  // namespace

std::string read_whole_file(const std::filesystem::path& path, std::uintmax_t max_bytes, std::string_view what) {
  struct stat st {};
  const int fd = open_regular_file(path, &st);
  if (std::uintmax_t(st.st_size) > max_bytes) {
    ::close(fd);
    fail(path.string(), ": ", std::uintmax_t(st.st_size), " bytes, over the limit of ", max_bytes, " for ", what);
  }
  std::string bytes(std::size_t(st.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      fail(path.string(), err ? ": read failed: " : ": the file became shorter while it was read",
           err ? std::strerror(err) : "");
    }
    done += std::size_t(n);
  }
  ::close(fd);
  return bytes;
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
  struct stat st {};
  const int fd = open_regular_file(path, &st);
  std::shared_ptr<MappedFile> file(new MappedFile);
  file->path_ = path;
  file->size_ = std::size_t(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path.string(), ": cannot map ", file->size_, " bytes: ", std::strerror(err));
    }
    file->data_ = p;
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace qvl
