// The thread pool runs every index of every loop exactly once, whatever mix of loop sizes follows (workers that sit
// out a small loop must not replay a later one), a second caller runs its loop on its own thread, and a chunk's
// exception reaches the caller. parallel_chunks and parallel_guided also cut the loop as asked and let the free
// threads take a slow one's share.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace qvl {
namespace {

TEST(ThreadPool, RunsEveryIndexExactlyOnceAcrossLoopsOfMixedSizes) {
  ThreadPool pool(16);  // more threads than this machine has cores: workers are preempted at awkward moments
  std::vector<std::atomic<int>> counts(64);
  for (int iter = 0; iter < 4000; ++iter) {
    const std::size_t n = iter % 5 == 0 ? 64 : std::size_t(1 + iter % 7);
    for (std::size_t i = 0; i < n; ++i) counts[i] = 0;
    pool.parallel_for(n, 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) counts[i].fetch_add(1);
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(counts[i].load(), 1) << "loop " << iter << " index " << i << " of " << n;
  }
}

// A chunk that starts a loop of its own, on the caller's thread or a worker's, runs that loop alone and whole.
TEST(ThreadPool, ALoopInsideAChunkRunsWhole) {
  ThreadPool pool(4);
  std::atomic<long> inner{0};
  pool.parallel_for(4, 1, [&](std::size_t, std::size_t) {
    pool.parallel_for(50, 1, [&](std::size_t begin, std::size_t end) { inner += long(end - begin); });
  });
  EXPECT_EQ(inner.load(), 4L * 50);
}

TEST(ThreadPool, ConcurrentCallersEachGetTheirWholeLoop) {
  ThreadPool pool(4);
  std::atomic<long> total{0};
  auto caller = [&] {
    for (int iter = 0; iter < 2000; ++iter)
      pool.parallel_for(100, 1, [&](std::size_t begin, std::size_t end) { total += long(end - begin); });
  };
  std::thread other(caller);
  caller();
  other.join();
  EXPECT_EQ(total.load(), 2L * 2000 * 100);
}

// A chunk that throws, the caller's own or a worker's, fails the loop in the caller, after every other chunk has
// finished (the workers read the caller's stack), and the pool goes on with the next loop.
TEST(ThreadPool, AChunkThatThrowsFailsItsLoopOnceEveryChunkHasFinished) {
  ThreadPool pool(4);
  for (const std::size_t thrower : {std::size_t(0), std::size_t(3)}) {  // chunk 0 is the caller's, 3 a worker's
    std::atomic<int> finished{0};
    EXPECT_THROW(pool.parallel_for(4, 1,
                                   [&](std::size_t begin, std::size_t end) {
                                     if (begin == thrower) throw std::runtime_error("chunk failed");
                                     std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                     finished += int(end - begin);
                                   }),
                 std::runtime_error)
        << "chunk " << thrower;
    EXPECT_EQ(finished.load(), 3) << "chunk " << thrower;
  }
  std::atomic<int> total{0};
  pool.parallel_for(100, 1, [&](std::size_t begin, std::size_t end) { total += int(end - begin); });
  EXPECT_EQ(total.load(), 100);
}

TEST(ThreadPool, ParallelChunksRunsEveryIndexOnceInChunksOfTheGivenSize) {
  ThreadPool pool(16);
  std::vector<std::atomic<int>> counts(300);
  for (int iter = 0; iter < 600; ++iter) {
    const std::size_t n = std::size_t(iter % 300), chunk = std::size_t(1 + iter % 37);
    for (std::size_t i = 0; i < n; ++i) counts[i] = 0;
    std::atomic<bool> misshapen{false};
    pool.parallel_chunks(n, chunk, [&](std::size_t begin, std::size_t end) {
      if (begin % chunk != 0 || end != std::min(n, begin + chunk)) misshapen = true;
      for (std::size_t i = begin; i < end; ++i) counts[i].fetch_add(1);
    });
    ASSERT_FALSE(misshapen.load()) << "loop " << iter << ": a chunk not [c·" << chunk << ", (c + 1)·" << chunk << ")";
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(counts[i].load(), 1) << "loop " << iter << " index " << i << " of " << n;
  }
}

// parallel_for would give the thread that stalls on its first chunk a quarter of the loop (10 chunks); here the other
// three take the rest while it sleeps (at most 5 for it leaves room for threads a loaded machine starves).
TEST(ThreadPool, ParallelChunksLetsTheFreeThreadsTakeASlowThreadsShare) {
  ThreadPool pool(4);
  std::mutex mutex;
  std::map<std::thread::id, int> chunks_by_thread;
  std::thread::id slow;
  pool.parallel_chunks(40, 1, [&](std::size_t begin, std::size_t) {
    {
      std::lock_guard lock(mutex);
      ++chunks_by_thread[std::this_thread::get_id()];
      if (begin == 0) slow = std::this_thread::get_id();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(begin == 0 ? 300 : 1));
  });
  int total = 0;
  for (const auto& [id, count] : chunks_by_thread) total += count;
  EXPECT_EQ(total, 40);
  EXPECT_LE(chunks_by_thread[slow], 5);
}

// Inside a chunk of another loop, or with one chunk, the loop runs on the calling thread, whole (a guided one too).
TEST(ThreadPool, ParallelChunksRunsAloneWhereParallelForWould) {
  ThreadPool pool(4);
  std::atomic<long> inner{0};
  std::atomic<bool> elsewhere{false};
  pool.parallel_for(4, 1, [&](std::size_t, std::size_t) {
    const auto caller = std::this_thread::get_id();
    const auto count = [&](std::size_t begin, std::size_t end) {
      inner += long(end - begin);
      if (std::this_thread::get_id() != caller) elsewhere = true;
    };
    pool.parallel_chunks(50, 7, count);
    pool.parallel_guided(500, 7, count);
  });
  EXPECT_EQ(inner.load(), 4L * 550);
  EXPECT_FALSE(elsewhere.load());
  std::vector<std::pair<std::size_t, std::size_t>> calls;
  pool.parallel_chunks(5, 8, [&](std::size_t begin, std::size_t end) { calls.emplace_back(begin, end); });
  EXPECT_EQ(calls, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 5}}));
}

// Guided chunks: every index once, the chunks tiling the loop; in order they never grow, the first is a 2·size()-th
// of the loop, and none is shorter than `least` except the one that ends the loop.
TEST(ThreadPool, ParallelGuidedRunsEveryIndexOnceInShrinkingChunks) {
  for (const int threads : {1, 3, 16}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> counts(5000);
    for (int iter = 0; iter < 300; ++iter) {
      const std::size_t n = std::size_t(iter * 17 % 5000), least = std::size_t(iter % 70);  // 0: taken as 1
      for (std::size_t i = 0; i < n; ++i) counts[i] = 0;
      std::mutex mutex;
      std::map<std::size_t, std::size_t> chunks;  // begin -> end
      pool.parallel_guided(n, least, [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) counts[i].fetch_add(1);
        std::lock_guard lock(mutex);
        chunks[begin] = end;
      });
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(counts[i].load(), 1) << threads << " threads, loop " << iter << " index " << i << " of " << n;
      if (n == 0) continue;
      const std::size_t first = chunks.begin()->second;
      EXPECT_EQ(first, std::min(n, std::max(std::max<std::size_t>(1, least), n / (2 * std::size_t(threads)))))
          << "n " << n << " least " << least;
      std::size_t previous = first, next_begin = 0;
      for (const auto& [begin, end] : chunks) {
        ASSERT_EQ(begin, next_begin) << "n " << n << ": the chunks do not tile the loop";
        ASSERT_LE(end, n);
        next_begin = end;
        ASSERT_LE(end - begin, previous) << "n " << n << ": the chunk at " << begin << " grew";
        if (end != n) {
          ASSERT_GE(end - begin, std::max<std::size_t>(1, least)) << "n " << n << ": the chunk at " << begin;
        }
        previous = end - begin;
      }
      ASSERT_EQ(next_begin, n);
    }
  }
}

// A thread that stalls on the first chunk holds only that chunk: the others take the rest. (Fixed shares would have
// given it a quarter of the loop, 100 items; its first chunk is 400 / 8 = 50.)
TEST(ThreadPool, ParallelGuidedLetsTheFreeThreadsTakeASlowThreadsShare) {
  ThreadPool pool(4);
  std::mutex mutex;
  std::map<std::thread::id, std::size_t> items_by_thread;
  std::thread::id slow;
  pool.parallel_guided(400, 1, [&](std::size_t begin, std::size_t end) {
    {
      std::lock_guard lock(mutex);
      items_by_thread[std::this_thread::get_id()] += end - begin;
      if (begin == 0) slow = std::this_thread::get_id();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(begin == 0 ? 300 : 1));
  });
  std::size_t total = 0;
  for (const auto& [id, items] : items_by_thread) total += items;
  EXPECT_EQ(total, 400u);
  EXPECT_LT(items_by_thread[slow], 100u);
}

}  // namespace
}  // namespace qvl
