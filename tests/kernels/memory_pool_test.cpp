// The memory pool against a fake upstream that records every segment: rounding, best fit, splitting and
// coalescing, stream separation, statistics and peaks, scopes, snapshots, capacity and out-of-memory handling,
// and concurrent use.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "memory_pool.h"

namespace qvl::pool {
namespace {

struct FakeDevice {
  std::map<void*, std::size_t> live;
  std::size_t limit = SIZE_MAX, in_use = 0;
  int allocations = 0, releases = 0;
  Upstream upstream() {
    return {[this](std::size_t n) -> void* {
              if (in_use + n > limit) return nullptr;
              void* p = std::aligned_alloc(4096, n);
              live[p] = n;
              in_use += n;
              ++allocations;
              return p;
            },
            [this](void* p, std::size_t n) {
              EXPECT_EQ(live.at(p), n);
              live.erase(p);
              in_use -= n;
              ++releases;
              std::free(p);
            }};
  }
};

constexpr std::size_t MiB = 1 << 20;

TEST(MemoryPool, RoundsAndServesSmallRequestsFromOneSegment) {
  FakeDevice dev;
  MemoryPool pool(dev.upstream());
  EXPECT_EQ(MemoryPool::round_size(1), 512u);
  EXPECT_EQ(MemoryPool::round_size(513), 1024u);
  void* a = pool.allocate(100);
  void* b = pool.allocate(1000);
  EXPECT_EQ(dev.allocations, 1);  // one 2 MiB segment serves both
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 512);
  const Stats s = pool.stats();
  EXPECT_EQ(s.requested.current, 1100);
  EXPECT_EQ(s.allocated.current, 512 + 1024);
  EXPECT_EQ(s.reserved.current, int64_t(2 * MiB));
  EXPECT_EQ(s.active_blocks.current, 2);
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.stats().allocated.current, 0);
  EXPECT_EQ(dev.releases, 0);  // cached, not returned
  pool.release_cached();
  EXPECT_EQ(dev.releases, 1);
  EXPECT_EQ(pool.stats().reserved.current, 0);
}

TEST(MemoryPool, SplitsReusesBestFitAndCoalesces) {
  FakeDevice dev;
  MemoryPool pool(dev.upstream());
  void* big = pool.allocate(12 * MiB);  // its own 12 MiB segment (>= 10 MiB: rounded to 2 MiB)
  void* mid = pool.allocate(3 * MiB);   // a 20 MiB segment, split
  void* mid2 = pool.allocate(4 * MiB);  // from the rest of it
  EXPECT_EQ(dev.allocations, 2);
  EXPECT_EQ(static_cast<char*>(mid2) - static_cast<char*>(mid), int64_t(3 * MiB));
  pool.release(mid);
  void* again = pool.allocate(2 * MiB);  // best fit: the freed 3 MiB hole, not the 13 MiB tail
  EXPECT_EQ(again, mid);
  pool.release(again);
  pool.release(mid2);  // all three pieces coalesce into the whole 20 MiB segment again
  const auto snap = pool.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  int whole = 0;
  for (const auto& seg : snap)
    if (seg.size == 20 * MiB) {
      ASSERT_EQ(seg.blocks.size(), 1u);
      EXPECT_FALSE(seg.blocks[0].allocated);
      ++whole;
    }
  EXPECT_EQ(whole, 1);
  pool.release(big);
  pool.release_cached();
  EXPECT_TRUE(dev.live.empty());
}

TEST(MemoryPool, KeepsStreamsApart) {
  FakeDevice dev;
  MemoryPool pool(dev.upstream());
  void* a = pool.allocate(4096, Owner::Activations, 1);
  pool.release(a);
  void* b = pool.allocate(4096, Owner::Activations, 2);  // must not reuse stream 1's block
  EXPECT_NE(a, b);
  EXPECT_EQ(dev.allocations, 2);
  void* c = pool.allocate(4096, Owner::Activations, 1);
  EXPECT_EQ(a, c);
  pool.release(b);
  pool.release(c);
}

TEST(MemoryPool, TracksOwnersFragmentationPeaksAndScopes) {
  FakeDevice dev;
  MemoryPool pool(dev.upstream());
  void* w = pool.allocate(30 * MiB, Owner::Weights);
  pool.begin_scope();
  void* a1 = pool.allocate(1 * MiB, Owner::Activations);
  void* a2 = pool.allocate(1 * MiB, Owner::Activations);
  pool.begin_scope();
  void* k = pool.allocate(2 * MiB, Owner::KvCache);
  pool.release(k);
  EXPECT_EQ(pool.end_scope(), int64_t(34 * MiB));  // inner peak
  pool.release(a1);
  // a1 and a2 share a 2 MiB small segment: a1's freed half beside the live a2 is fragmentation; k's 20 MiB
  // segment coalesced back to one free block and does not count.
  EXPECT_EQ(pool.stats().inactive_split.current, int64_t(1 * MiB));
  const auto owners = pool.bytes_by_owner();
  EXPECT_EQ(owners.at(Owner::Weights), int64_t(30 * MiB));
  EXPECT_EQ(owners.at(Owner::Activations), int64_t(1 * MiB));
  EXPECT_EQ(owners.count(Owner::KvCache), 0u);
  EXPECT_EQ(pool.end_scope(), int64_t(34 * MiB));
  const Stats s = pool.stats();
  EXPECT_EQ(s.allocated.peak, int64_t(34 * MiB));
  EXPECT_EQ(s.alloc_count, 4);
  EXPECT_EQ(s.free_count, 2);
  pool.reset_peaks();
  EXPECT_EQ(pool.stats().allocated.peak, int64_t(31 * MiB));
  pool.release(a2);
  pool.release(w);
  EXPECT_THROW(pool.end_scope(), std::logic_error);
  EXPECT_THROW(pool.release(reinterpret_cast<void*>(0x1234)), std::invalid_argument);
}

// The fragmentation figure kept as blocks come and go, against the snapshot counted from scratch: the free bytes of
// every segment that holds an allocated block.
int64_t inactive_from_snapshot(const MemoryPool& pool) {
  int64_t inactive = 0;
  for (const SegmentInfo& segment : pool.snapshot()) {
    int64_t free_bytes = 0;
    bool any_allocated = false;
    for (const BlockInfo& b : segment.blocks) {
      any_allocated |= b.allocated;
      if (!b.allocated) free_bytes += int64_t(b.size);
    }
    if (any_allocated) inactive += free_bytes;
  }
  return inactive;
}

TEST(MemoryPool, KeepsFragmentationEqualToTheSnapshotsCountThroughSplitsCoalescingAndReleases) {
  FakeDevice dev;
  MemoryPool pool(dev.upstream());
  std::vector<void*> live;
  uint32_t seed = 12345;
  const auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  for (int step = 0; step < 3000; ++step) {
    const uint32_t r = next();
    if (live.empty() || r % 5 < 3) {  // small, mid and large requests, so every segment class splits and coalesces
      const std::size_t sizes[] = {700, 64 << 10, 900 << 10, 3 * MiB, 12 * MiB};
      live.push_back(pool.allocate(sizes[next() % 5] + next() % 4096, Owner::Activations, int(next() % 2)));
    } else {
      const std::size_t i = next() % live.size();
      pool.release(live[i]);
      live.erase(live.begin() + std::ptrdiff_t(i));
    }
    if (step % 500 == 499) pool.release_cached();
    ASSERT_EQ(pool.stats().inactive_split.current, inactive_from_snapshot(pool)) << "step " << step;
  }
  for (void* p : live) pool.release(p);
  EXPECT_EQ(pool.stats().inactive_split.current, 0);
  EXPECT_GT(pool.stats().inactive_split.peak, int64_t(MiB));
}

TEST(MemoryPool, EnforcesCapacityReleasingCacheBeforeGivingUp) {
  FakeDevice dev;
  MemoryPool pool(dev.upstream(), 64 * MiB);
  void* a = pool.allocate(40 * MiB);
  pool.release(a);  // cached: 40 MiB reserved, nothing allocated
  void* b = pool.allocate(50 * MiB);  // needs the cache back: released, then retried
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(pool.stats().oom_retries, 1);
  EXPECT_EQ(pool.stats().reserved.current, int64_t(50 * MiB));
  try {
    pool.allocate(20 * MiB);
    FAIL() << "allocated past the capacity";
  } catch (const OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("asked for 20.0 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("50.0 MiB allocated"), std::string::npos) << what;
    EXPECT_NE(what.find("of a 64.0 MiB capacity"), std::string::npos) << what;
  }
  EXPECT_EQ(pool.stats().oom_errors, 1);
  void* c = pool.allocate(12 * MiB);  // a tight capacity gets an exact segment, not a 20 MiB one
  EXPECT_NE(c, nullptr);
  pool.release(b);
  pool.release(c);
}

TEST(MemoryPool, ReportsUpstreamFailureAsOutOfMemory) {
  FakeDevice dev;
  dev.limit = 8 * MiB;
  MemoryPool pool(dev.upstream());
  void* a = pool.allocate(1000);
  EXPECT_THROW(pool.allocate(30 * MiB), OutOfMemory);
  pool.release(a);
}

TEST(MemoryPool, AnInjectedFailureFailsExactlyTheNthAllocationAndChangesNothingElse) {
  FakeDevice dev;
  MemoryPool pool(dev.upstream());
  void* a = pool.allocate(1000, Owner::Activations);
  pool.fail_allocation(2);
  void* b = pool.allocate(1000, Owner::Activations);
  const Stats before = pool.stats();
  try {
    pool.allocate(1000, Owner::Activations);
    FAIL() << "the injected failure did not happen";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("injected by a fault-injection test"), std::string::npos) << e.what();
  }
  const Stats after = pool.stats();
  EXPECT_EQ(after.allocated.current, before.allocated.current);
  EXPECT_EQ(after.reserved.current, before.reserved.current);
  EXPECT_EQ(after.alloc_count, before.alloc_count);
  void* c = pool.allocate(1000, Owner::Activations);  // once only
  for (void* p : {a, b, c}) pool.release(p);
  EXPECT_EQ(pool.stats().allocated.current, 0);
}

TEST(MemoryPool, StaysConsistentUnderConcurrentUse) {
  FakeDevice dev;
  MemoryPool pool(dev.upstream());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&pool, t] {
      std::vector<void*> held;
      for (int i = 0; i < 2000; ++i) {
        held.push_back(pool.allocate(std::size_t(512 * (1 + (i * 7 + t) % 50)), Owner::Activations, t % 2));
        if (held.size() > 20) {
          pool.release(held.front());
          held.erase(held.begin());
        }
      }
      for (void* p : held) pool.release(p);
    });
  for (auto& th : threads) th.join();
  const Stats s = pool.stats();
  EXPECT_EQ(s.allocated.current, 0);
  EXPECT_EQ(s.active_blocks.current, 0);
  EXPECT_EQ(s.alloc_count, 8000);
  EXPECT_EQ(s.free_count, 8000);
  pool.release_cached();
  EXPECT_TRUE(dev.live.empty());
}

}  // namespace
}  // namespace qvl::pool
