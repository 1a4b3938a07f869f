#include "backend/cpu/huge_pages.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "core/thread_pool.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace qvl::cpu {
namespace {

// MemAvailable and MemTotal from /proc/meminfo, in bytes (0 when unreadable), narrowed to the process's memory
// cgroup where that sets a limit (a container's: /proc/meminfo shows the whole machine's).
struct MemoryInfo {
  std::size_t available = 0, total = 0;
};

// The first number in a file (cgroup v2's memory.max holds "max" when unlimited: then nothing).
std::optional<std::size_t> number_in(const char* path) {
  std::ifstream file(path);
  std::size_t value = 0;
  if (file >> value) return value;
  return std::nullopt;
}

MemoryInfo memory_info() {
  MemoryInfo info;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") info.available = kib * 1024;
    if (key == "MemTotal:") info.total = kib * 1024;
  }
  // cgroup v2, then v1 (whose "no limit" is a huge number, above the machine's memory).
  std::optional<std::size_t> limit = number_in("/sys/fs/cgroup/memory.max");
  std::optional<std::size_t> used = number_in("/sys/fs/cgroup/memory.current");
  if (!limit) {
    limit = number_in("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = number_in("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit && used && *limit < info.total) {
    info.total = *limit;
    info.available = std::min(info.available, *limit > *used ? *limit - *used : 0);
  }
  return info;
}

}  // namespace

bool huge_pages_offered() {
  static const bool offered = [] {
    std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
    std::stringstream text;
    text << enabled.rdbuf();
    const std::string s = text.str();
    return s.find("[always]") != std::string::npos || s.find("[madvise]") != std::string::npos;
  }();
  return offered;
}

bool room_for_copy(std::size_t bytes) {
  const MemoryInfo memory = memory_info();
  return memory.available >= bytes && memory.available - bytes >= memory.total / 4;
}

Tensor empty_on_huge_pages(DType dtype, const Shape& shape) {
#ifdef __linux__
  const std::size_t size = std::size_t(shape_numel(shape)) * dtype_size(dtype);
  if (size < kHugePageBytes || !huge_pages_offered()) return {};
  const std::size_t bytes = (size + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (!room_for_copy(bytes)) return {};
  // 2 MiB more than needed, so that a 2 MiB-aligned range of `bytes` lies inside; the rest is given back.
  void* reserved = mmap(nullptr, bytes + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (reserved == MAP_FAILED) return {};
  const auto start = reinterpret_cast<std::uintptr_t>(reserved);
  const std::uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) munmap(reserved, aligned - start);
  if (const std::size_t tail = start + bytes + kHugePageBytes - (aligned + bytes); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);  // advice: without it the memory still works, on 4 KB pages
  std::shared_ptr<const void> owner(p, [bytes](const void* q) { munmap(const_cast<void*>(q), bytes); });
  return Tensor::borrow(dtype, shape, p, std::move(owner));
#else
  (void)dtype, (void)shape;
  return {};
#endif
}

Tensor on_huge_pages(const Tensor& t) {
  if (t.device() != Device::CPU) return t;
  Tensor copy = empty_on_huge_pages(t.dtype(), t.shape());
  if (!copy.raw()) return t;
  // Copied a huge page at a time over the threads: most of the time is the kernel's, giving each page as it is
  // first written (zeroed, and on a virtual machine possibly backed by the host first), and the threads' faults run
  // side by side.
  const std::size_t pages = (t.nbytes() + kHugePageBytes - 1) / kHugePageBytes;
  ThreadPool::global().parallel_for(pages, 1, [&](std::size_t begin, std::size_t end) {
    const std::size_t from = begin * kHugePageBytes, to = std::min(end * kHugePageBytes, t.nbytes());
    if (from < to) std::memcpy(static_cast<char*>(copy.raw()) + from, static_cast<const char*>(t.raw()) + from, to - from);
  });
  return copy;
}

}  // namespace qvl::cpu
