#include "memory_pool.h"

#include <algorithm>
#include <sstream>

namespace qvl::pool {

const char* owner_name(Owner o) {
  switch (o) {
    case Owner::Weights: return "weights";
    case Owner::KvCache: return "kv cache";
    case Owner::Activations: return "activations";
    case Owner::Workspace: return "workspace";
    default: return "other";
  }
}

void Stat::add(int64_t v) {
  current += v;
  total += v;
  peak = std::max(peak, current);
}

struct MemoryPool::Block {
  Block(char* p, std::size_t n, bool is_small, int on_stream, char* segment_base, std::size_t segment_bytes)
      : ptr(p), size(n), small(is_small), stream(on_stream), segment(segment_base), segment_size(segment_bytes) {}
  char* ptr;
  std::size_t size;
  std::size_t requested = 0;
  bool allocated = false;
  bool small;
  Owner owner = Owner::Other;
  int stream;
  Block* prev = nullptr;  // neighbours inside the segment, by address
  Block* next = nullptr;
  char* segment;          // base address of the segment
  std::size_t segment_size;
};

bool MemoryPool::BySize::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

std::size_t MemoryPool::round_size(std::size_t bytes) {
  return bytes < kRound ? kRound : (bytes + kRound - 1) / kRound * kRound;
}

MemoryPool::MemoryPool(Upstream upstream, std::size_t capacity) : upstream_(std::move(upstream)), capacity_(capacity) {}

MemoryPool::~MemoryPool() {
  for (Block* first : segments_) {
    upstream_.release(first->segment, first->segment_size);
    for (Block* b = first; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

MemoryPool::Block* MemoryPool::find_free(std::size_t size, bool small, int stream) {
  auto& pool = small ? free_small_ : free_large_;
  Block key(nullptr, size, small, stream, nullptr, 0);
  const auto it = pool.lower_bound(&key);  // the smallest block of this stream that fits: best fit
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

MemoryPool::Block* MemoryPool::new_segment(std::size_t size, bool small, int stream) {
  std::size_t segment = small ? kSmallSegment : size < kMidLimit ? kLargeSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
  const auto reserved = std::size_t(stats_.reserved.current);
  if (reserved + segment > capacity_ && reserved + size <= capacity_ && !small)
    segment = (size + kLargeRound - 1) / kLargeRound * kLargeRound;  // a tight capacity: no 20 MiB headroom
  if (reserved + segment > capacity_) return nullptr;
  void* p = upstream_.allocate(segment);
  if (!p) return nullptr;
  auto* block = new Block(static_cast<char*>(p), segment, small, stream, static_cast<char*>(p), segment);
  segments_.push_back(block);
  stats_.reserved.add(int64_t(segment));
  stats_.segments.add(1);
  return block;
}

void MemoryPool::split(Block* block, std::size_t size) {
  const std::size_t rest = block->size - size;
  // Keep a remainder only if it can serve a request of its class (PyTorch's rule).
  if (block->small ? rest < kRound : rest <= kSmallLimit) return;
  auto* tail = new Block(block->ptr + size, rest, block->small, block->stream, block->segment, block->segment_size);
  tail->prev = block;
  tail->next = block->next;
  if (block->next) block->next->prev = tail;
  block->next = tail;
  block->size = size;
  (block->small ? free_small_ : free_large_).insert(tail);
}

void* MemoryPool::allocate(std::size_t bytes, Owner owner, int stream) {
  std::lock_guard lock(mutex_);
  const std::size_t size = round_size(bytes);
  if (fail_countdown_ > 0 && --fail_countdown_ == 0) throw_oom(bytes, size, "injected by a fault-injection test");
  const bool small = size <= kSmallLimit;
  Block* block = find_free(size, small, stream);
  if (!block) block = new_segment(size, small, stream);
  if (!block) {  // give back what is cached and try once more
    ++stats_.oom_retries;
    release_cached_locked();
    block = new_segment(size, small, stream);
  }
  if (!block) throw_oom(bytes, size, stats_.reserved.current + int64_t(size) > int64_t(capacity_) ? "over the pool capacity" : "the device is out of memory");
  split(block, size);
  block->allocated = true;
  block->requested = bytes;
  block->owner = owner;
  allocated_[block->ptr] = block;
  stats_.requested.add(int64_t(bytes));
  stats_.allocated.add(int64_t(block->size));
  stats_.active_blocks.add(1);
  ++stats_.alloc_count;
  for (auto& peak : scope_peaks_) peak = std::max(peak, stats_.allocated.current);
  account_segment_use(block, true);
  return block->ptr;
}

std::size_t MemoryPool::block_bytes(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto it = allocated_.find(const_cast<void*>(ptr));
  return it == allocated_.end() ? 0 : it->second->size;
}

void MemoryPool::release(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  const auto it = allocated_.find(ptr);
  if (it == allocated_.end()) throw std::invalid_argument("MemoryPool::release: pointer was not allocated by this pool");
  Block* block = it->second;
  allocated_.erase(it);
  stats_.requested.sub(int64_t(block->requested));
  stats_.allocated.sub(int64_t(block->size));
  stats_.active_blocks.sub(1);
  ++stats_.free_count;
  account_segment_use(block, false);
  block->allocated = false;
  block->requested = 0;
  auto& pool = block->small ? free_small_ : free_large_;
  // Coalesce with free neighbours (same segment, hence same stream and class).
  for (Block* neighbour : {block->prev, block->next}) {
    if (!neighbour || neighbour->allocated) continue;
    pool.erase(neighbour);
    if (neighbour == block->prev) {
      neighbour->size += block->size;
      neighbour->next = block->next;
      if (block->next) block->next->prev = neighbour;
      delete block;
      block = neighbour;
    } else {
      block->size += neighbour->size;
      block->next = neighbour->next;
      if (neighbour->next) neighbour->next->prev = block;
      delete neighbour;
    }
  }
  pool.insert(block);
}

void MemoryPool::release_cached() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

void MemoryPool::release_cached_locked() {
  std::vector<Block*> kept;
  for (Block* first : segments_) {
    if (first->allocated || first->next) {  // holds an allocation (a split segment always does)
      kept.push_back(first);
      continue;
    }
    (first->small ? free_small_ : free_large_).erase(first);
    segment_use_.erase(first->segment);  // no allocated block: no share of inactive_split
    upstream_.release(first->segment, first->segment_size);
    stats_.reserved.sub(int64_t(first->segment_size));
    stats_.segments.sub(1);
    delete first;
  }
  segments_ = std::move(kept);
}

void MemoryPool::account_segment_use(const Block* block, bool allocated) {
  SegmentUse& use = segment_use_[block->segment];
  const int64_t before = use.inactive(block->segment_size);
  if (allocated) use.allocated_bytes += block->size, ++use.allocated_blocks;
  else use.allocated_bytes -= block->size, --use.allocated_blocks;
  const int64_t delta = use.inactive(block->segment_size) - before;
  if (delta > 0) stats_.inactive_split.add(delta);
  else if (delta < 0) stats_.inactive_split.sub(-delta);
}

void MemoryPool::throw_oom(std::size_t asked, std::size_t rounded, const char* why) {
  ++stats_.oom_errors;
  std::ostringstream msg;
  const auto mib = [](int64_t b) { return double(b) / (1 << 20); };
  msg.precision(1);
  msg << std::fixed << "out of device memory (" << why << "): asked for " << mib(int64_t(asked)) << " MiB ("
      << rounded << " bytes rounded); " << mib(stats_.allocated.current) << " MiB allocated, " << mib(stats_.cached_bytes())
      << " MiB cached, " << mib(stats_.reserved.current) << " MiB reserved";
  if (capacity_ != SIZE_MAX) msg << " of a " << mib(int64_t(capacity_)) << " MiB capacity";
  throw OutOfMemory(msg.str());
}

void MemoryPool::fail_allocation(int64_t nth) {
  std::lock_guard lock(mutex_);
  fail_countdown_ = std::max<int64_t>(0, nth);
}

void MemoryPool::set_capacity(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  capacity_ = bytes;
  if (std::size_t(stats_.reserved.current) > capacity_) release_cached_locked();
}

std::size_t MemoryPool::capacity() const {
  std::lock_guard lock(mutex_);
  return capacity_;
}

Stats MemoryPool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void MemoryPool::reset_peaks() {
  std::lock_guard lock(mutex_);
  for (Stat* s : {&stats_.requested, &stats_.allocated, &stats_.reserved, &stats_.active_blocks, &stats_.segments, &stats_.inactive_split})
    s->peak = s->current;
}

std::map<Owner, int64_t> MemoryPool::bytes_by_owner() const {
  std::lock_guard lock(mutex_);
  std::map<Owner, int64_t> out;
  for (const auto& [ptr, block] : allocated_) out[block->owner] += int64_t(block->size);
  return out;
}

std::vector<SegmentInfo> MemoryPool::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<SegmentInfo> out;
  for (const Block* first : segments_) {
    SegmentInfo seg{reinterpret_cast<uintptr_t>(first->segment), first->segment_size, first->small, {}};
    for (const Block* b = first; b; b = b->next)
      seg.blocks.push_back({std::size_t(b->ptr - b->segment), b->size, b->requested, b->allocated, b->owner, b->stream});
    out.push_back(std::move(seg));
  }
  std::sort(out.begin(), out.end(), [](const SegmentInfo& a, const SegmentInfo& b) { return a.address < b.address; });
  return out;
}

void MemoryPool::begin_scope() {
  std::lock_guard lock(mutex_);
  scope_peaks_.push_back(stats_.allocated.current);
}

int64_t MemoryPool::end_scope() {
  std::lock_guard lock(mutex_);
  if (scope_peaks_.empty()) throw std::logic_error("MemoryPool::end_scope without begin_scope");
  const int64_t peak = scope_peaks_.back();
  scope_peaks_.pop_back();
  return peak;
}

}  // namespace qvl::pool
