#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace qvl {

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
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* task = task_;
    const std::size_t begin = index * chunk_size_, end = std::min(n_, begin + chunk_size_);
    const bool has_work = index < chunks_;
    lock.unlock();
    if (has_work && begin < end) (*task)(begin, end);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

void ThreadPool::parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n == 0) return;
  const std::size_t max_chunks = std::max<std::size_t>(1, n / std::max<std::size_t>(1, grain));
  const std::size_t chunks = std::min<std::size_t>(std::size_t(size()), max_chunks);
  if (chunks == 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    task_ = &fn;
    n_ = n;
    chunks_ = chunks;
    chunk_size_ = (n + chunks - 1) / chunks;
    pending_ = workers_.size();
    ++generation_;
  }
  wake_.notify_all();
  fn(0, std::min(n, chunk_size_));
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("QVL_THREADS"); env && std::atoi(env) > 0) return std::atoi(env);
    return int(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace qvl
