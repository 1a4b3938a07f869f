#pragma once
// The device memory pool: a caching allocator in the manner of PyTorch's CUDA caching allocator, with RMM-style
// statistics. Plain C++ (the upstream that really allocates is injected), so it is tested without a GPU and the CUDA
// plugin plugs cudaMalloc/cudaFree in.
//
// - Requests round up to 512 bytes. Small requests (<= 1 MiB) come from 2 MiB segments, large ones from segments of
//   20 MiB (requests under 10 MiB) or the request rounded up to 2 MiB; blocks are best-fit, split when the rest is
//   worth keeping, and coalesced with free neighbours on release.
// - Blocks remember their stream: a free block is reused only by the stream that freed it (the device may still
//   be reading it from that stream).
// - A capacity turns "pretend this is a 2 GB card" into real out-of-memory errors. On a failed allocation the pool
//   releases its cached segments and retries once; then it throws OutOfMemory with the numbers.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace qvl::pool {

enum class Owner : uint8_t { Weights, KvCache, Activations, Workspace, Other };
const char* owner_name(Owner o);

// Where segments really come from (cudaMalloc on a GPU, a fake in tests). allocate returns nullptr when it cannot.
struct Upstream {
  std::function<void*(std::size_t)> allocate;
  std::function<void(void*, std::size_t)> release;
};

struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Current, peak and cumulative (total ever added) values of one statistic.
struct Stat {
  int64_t current = 0, peak = 0, total = 0;
  void add(int64_t v);
  void sub(int64_t v) { current -= v; }
};

struct Stats {
  Stat requested;       // bytes callers asked for
  Stat allocated;       // bytes in blocks handed out (rounded)
  Stat reserved;        // bytes in segments taken from upstream
  Stat active_blocks;   // blocks handed out
  Stat segments;
  Stat inactive_split;  // free bytes inside segments that also hold allocated blocks: fragmentation
  int64_t alloc_count = 0, free_count = 0, oom_retries = 0, oom_errors = 0;
  int64_t cached_bytes() const { return reserved.current - allocated.current; }
};

struct BlockInfo {
  std::size_t offset, size, requested;
  bool allocated;
  Owner owner;
  int stream;
};
struct SegmentInfo {
  uintptr_t address;
  std::size_t size;
  bool small;
  std::vector<BlockInfo> blocks;  // in address order
};

class MemoryPool {
public:
  static constexpr std::size_t kRound = 512, kSmallLimit = 1 << 20, kSmallSegment = 2 << 20,
                               kLargeSegment = 20 << 20, kMidLimit = 10 << 20, kLargeRound = 2 << 20;

  MemoryPool(Upstream upstream, std::size_t capacity = SIZE_MAX);
  ~MemoryPool();  // returns every segment upstream
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  void* allocate(std::size_t bytes, Owner owner = Owner::Other, int stream = 0);
  void release(void* ptr);
  // The bytes of the block `ptr` was given (its request rounded, or a larger block left whole); 0 when not ours.
  std::size_t block_bytes(const void* ptr) const;
  // Returns the segments that hold no allocated block to upstream.
  void release_cached();

  void set_capacity(std::size_t bytes);
  // Fault injection (tests): the nth allocate() from now (1: the next) throws OutOfMemory as a full device would,
  // nothing else changed; 0 disarms.
  void fail_allocation(int64_t nth);
  std::size_t capacity() const;
  Stats stats() const;
  void reset_peaks();
  // Bytes held per owner right now.
  std::map<Owner, int64_t> bytes_by_owner() const;
  std::vector<SegmentInfo> snapshot() const;

  // Peak allocated bytes between begin_scope() and end_scope(); scopes nest (a forward pass inside a request).
  void begin_scope();
  int64_t end_scope();

  static std::size_t round_size(std::size_t bytes);

private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  Block* find_free(std::size_t size, bool small, int stream);
  Block* new_segment(std::size_t size, bool small, int stream);
  void split(Block* block, std::size_t size);
  void release_cached_locked();
  // Keeps inactive_split current after `block` was allocated or released: only its segment's share changes, so
  // the pool never walks every block (an earlier walk over all segments on each call was 13-19% of the host's time
  // queueing a prefill or a vision pass on the H100 machine, sampled).
  void account_segment_use(const Block* block, bool allocated);
  [[noreturn]] void throw_oom(std::size_t asked, std::size_t rounded, const char* why);

  Upstream upstream_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::set<Block*, BySize> free_small_, free_large_;
  std::map<void*, Block*> allocated_;
  std::vector<Block*> segments_;  // first block of each segment
  struct SegmentUse {
    std::size_t allocated_bytes = 0;
    int64_t allocated_blocks = 0;
    // Free bytes beside live blocks: a segment's share of inactive_split.
    int64_t inactive(std::size_t segment_size) const {
      return allocated_blocks > 0 ? int64_t(segment_size - allocated_bytes) : 0;
    }
  };
  std::unordered_map<const char*, SegmentUse> segment_use_;  // by segment base
  Stats stats_;
  std::vector<int64_t> scope_peaks_;
  int64_t fail_countdown_ = 0;  // fail_allocation
};

}  // namespace qvl::pool
