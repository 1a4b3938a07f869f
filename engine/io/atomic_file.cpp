#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace qvl {

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  std::filesystem::path temp = path;
  temp += ".partial";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(temp.string(), ": cannot create: ", std::strerror(errno));
  std::size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      fail(temp.string(), ": write failed: ", std::strerror(err));
    }
    done += std::size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(temp.c_str());
    fail(temp.string(), ": flush failed: ", std::strerror(errno));
  }
  std::filesystem::rename(temp, path);
}

}  // namespace qvl
