#pragma once
// A fixed pool of worker threads for data-parallel loops. parallel_for splits [0, n) into contiguous chunks, one
// per thread (the caller takes the first), so each thread streams its own slice of a weight matrix.
//
// A decode step runs ~600 short parallel loops; waking a sleeping thread costs tens of microseconds each, which
// measured as ~15% of a 2B decode step. So workers spin for a short while after each loop before they sleep.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qvl {

class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Runs fn(begin, end) over chunks of [0, n) of at least `grain` items; returns when all are done. Choose the
  // grain so a chunk is worth a thread (tens of microseconds of work): tiny loops then run on the caller alone.
  // A second caller while a loop runs (another thread, or fn itself) runs its loop alone, on its own thread.
  void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn);

  // The process-wide pool, sized to the machine ($QVL_THREADS overrides).
  static ThreadPool& global();

private:
  void worker_loop(std::size_t index);
  std::vector<std::thread> workers_;
  std::mutex caller_;  // held by the caller whose loop the workers run
  std::mutex mutex_;   // guards the loop's description below; workers copy it under this lock
  std::condition_variable wake_;
  const std::function<void(std::size_t, std::size_t)>* task_ = nullptr;
  std::size_t n_ = 0, chunks_ = 0, chunk_size_ = 0;
  std::atomic<std::size_t> generation_{0};
  std::atomic<std::size_t> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace qvl
