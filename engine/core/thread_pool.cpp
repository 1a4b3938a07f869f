#include "core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace qvl {

namespace {
constexpr auto kSpin = std::chrono::microseconds(200);  // how long an idle worker polls before it sleeps
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this, i] { worker_loop(std::size_t(i)); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(std::size_t index) {
  std::size_t seen = 0;
  for (;;) {
    // Poll for new work for a short while, then sleep on the condition variable.
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed) &&
           std::chrono::steady_clock::now() < spin_until)
      _mm_pause();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
    }
    if (stop_.load()) return;
    // The generation and its loop are read together under the lock: a worker that sat out a loop (more threads
    // than chunks) may wake after later loops were published, and must take the newest one exactly once. Reading
    // the generation and the fields separately once let it run a loop twice (an in-place add, added twice).
    const std::function<void(std::size_t, std::size_t)>* task;
    std::size_t begin, end;
    {
      std::lock_guard lock(mutex_);
      seen = generation_.load(std::memory_order_acquire);
      if (index >= chunks_) continue;  // this loop needs fewer threads than the pool has
      task = task_;
      begin = index * chunk_size_;
      end = std::min(n_, begin + chunk_size_);
    }
    if (begin < end) (*task)(begin, end);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n == 0) return;
  const std::size_t max_chunks = std::max<std::size_t>(1, n / std::max<std::size_t>(1, grain));
  const std::size_t chunks = std::min<std::size_t>(std::size_t(size()), max_chunks);
  std::unique_lock caller(caller_, std::try_to_lock);
  if (chunks == 1 || workers_.empty() || !caller.owns_lock()) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);  // publishes the task before the generation bump
    task_ = &fn;
    n_ = n;
    chunks_ = chunks;
    chunk_size_ = (n + chunks - 1) / chunks;
    pending_.store(chunks - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  fn(0, std::min(n, chunk_size_));
  while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("QVL_THREADS"); env && std::atoi(env) > 0) return std::atoi(env);
    return int(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace qvl
