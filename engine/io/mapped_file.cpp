#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

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

namespace {

// Reading a mapped page past the end of a file that another program truncated raises SIGBUS, which killed the
// process. The handler finds the mapping the address is in, maps zero pages over the whole of it (MAP_FIXED) and
// marks it; the read that faulted is retried and sees zeros, and check_unchanged() fails the request that used it.
// Faults outside these mappings go to the disposition that was there before. Slots are lock-free so that the
// handler (which may run on any thread, at any moment) only reads atomics.
struct GuardedRange {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> faulted{false};
};
constexpr std::size_t kGuardedRanges = 1024;
GuardedRange g_ranges[kGuardedRanges];
struct sigaction g_previous_sigbus {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardedRange& r : g_ranges) {
    const uintptr_t begin = r.begin.load(std::memory_order_acquire), end = r.end.load(std::memory_order_acquire);
    // A slot given back and taken again between the two loads would pair one mapping's begin with another's end:
    // begin read again must be unchanged.
    if (begin == 0 || begin >= end || r.begin.load(std::memory_order_acquire) != begin) continue;
    if (address < begin || address >= end) continue;
    if (::mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
        MAP_FAILED) {
      r.faulted.store(true, std::memory_order_release);
      return;
    }
  }
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction) return g_previous_sigbus.sa_sigaction(signal, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    return g_previous_sigbus.sa_handler(signal);
  }
  ::signal(SIGBUS, SIG_DFL);  // delivered once the handler returns: the process ends as it would have
  ::raise(SIGBUS);
}

std::mutex g_ranges_mutex;  // slots are taken and given back under it; the handler only reads them

int guard_range(const void* data, std::size_t size) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, nullptr, &g_previous_sigbus);  // read before ours is live: a fault may come at once
    ::sigaction(SIGBUS, &action, nullptr);
  });
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const std::lock_guard lock(g_ranges_mutex);
  for (std::size_t i = 0; i < kGuardedRanges; ++i) {
    if (g_ranges[i].begin.load() != 0) continue;
    g_ranges[i].faulted.store(false);
    g_ranges[i].end.store(begin + (size + page - 1) / page * page);
    g_ranges[i].begin.store(begin, std::memory_order_release);  // last: the slot is live once begin is set
    return int(i);
  }
  return -1;  // more than kGuardedRanges files mapped at once: this one is read unguarded
}

void unguard_range(int slot) {
  if (slot < 0) return;
  const std::lock_guard lock(g_ranges_mutex);
  g_ranges[slot].begin.store(0, std::memory_order_release);
  g_ranges[slot].end.store(0);
}

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path, std::uintmax_t max_bytes,
                                                   std::string_view what) {
  struct stat st {};
  const int fd = open_regular_file(path, &st);
  if (std::uintmax_t(st.st_size) > max_bytes) {
    ::close(fd);
    fail(path.string(), ": ", std::uintmax_t(st.st_size), " bytes, over the limit of ", max_bytes, " for ", what);
  }
  std::shared_ptr<MappedFile> file(new MappedFile);
  file->path_ = path;
  file->fd_ = fd;  // kept: check_unchanged() asks it whether the file was rewritten in place
  file->size_ = std::size_t(st.st_size);
  file->modified_ns_ = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) fail(path.string(), ": cannot map ", file->size_, " bytes: ", std::strerror(errno));
    file->data_ = p;
    file->guard_slot_ = guard_range(p, file->size_);
  }
  return file;
}

MappedFile::~MappedFile() {
  unguard_range(guard_slot_);
  if (data_) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

bool MappedFile::changed() const {
  const bool faulted = guard_slot_ >= 0 && g_ranges[guard_slot_].faulted.load(std::memory_order_acquire);
  struct stat st {};
  return faulted || ::fstat(fd_, &st) != 0 || std::size_t(st.st_size) != size_ ||
         int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec != modified_ns_;
}

void MappedFile::check_unchanged() const {
  if (!changed()) return;
  const bool faulted = guard_slot_ >= 0 && g_ranges[guard_slot_].faulted.load(std::memory_order_acquire);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(path_.string(), ": cannot be checked any more (", std::strerror(errno), "); reopen the model");
  const auto now_size = std::size_t(st.st_size);
  if (faulted || now_size < size_)
    fail(path_.string(), ": was cut short by another program while the model was loaded (", now_size, " bytes, was ",
         size_, "); what was read past its end is not the model's; reopen the model");
  fail(path_.string(), ": was written by another program while the model was loaded (", now_size == size_ ? "same size, " : "",
       "a new modification time); the weights read from it may be a mix of two files; reopen the model");
}

}  // namespace qvl
