#include "core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

namespace qvl {

namespace {
constexpr auto kSpin = std::chrono::microseconds(200);  // how long an idle worker polls before it sleeps
// Whether this thread is the caller of a running loop: a chunk of its own that calls parallel_for again runs that
// loop alone (try_lock on the mutex the thread already holds would be undefined).
thread_local bool t_running_loop = false;
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this, i] { worker_loop(std::size_t(i)); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(sleep_mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::read_chunk(std::size_t index, std::size_t seen, Chunk& chunk) const {
  const std::size_t before = generation_.load(std::memory_order_acquire);
  if (before == seen || before % 2 != 0) return false;
  const Task* task = task_.load(std::memory_order_relaxed);
  const std::size_t n = n_.load(std::memory_order_relaxed), chunks = chunks_.load(std::memory_order_relaxed),
                    size = chunk_size_.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (generation_.load(std::memory_order_relaxed) != before) return false;  // rewritten while read: read again
  // A worker needed by a loop holds it open (pending_) until its chunk is done, so a loop it takes part in cannot be
  // replaced under it; one that sits a loop out may find a later loop here, and takes that one, once.
  chunk.generation = before;
  chunk.task = index < chunks ? task : nullptr;
  chunk.begin = std::min(n, index * size);
  chunk.end = std::min(n, chunk.begin + size);
  return true;
}

void ThreadPool::worker_loop(std::size_t index) {
  std::size_t seen = 0;
  Chunk chunk;
  for (;;) {
    // Poll for new work for a short while, then sleep on the condition variable.
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    bool found = false;
    while (!(found = read_chunk(index, seen, chunk)) && !stop_.load(std::memory_order_relaxed) &&
           std::chrono::steady_clock::now() < spin_until)
      _mm_pause();
    if (stop_.load()) return;
    if (!found) {
      std::unique_lock lock(sleep_mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      continue;  // (a generation still being written is read again by the poll)
    }
    seen = chunk.generation;
    if (chunk.task == nullptr) continue;  // this loop needs fewer threads than the pool has
    if (chunk.begin < chunk.end) run_chunk(*chunk.task, chunk.begin, chunk.end);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(std::size_t n, std::size_t grain, const Task& fn) {
  if (n == 0) return;
  const std::size_t max_chunks = std::max<std::size_t>(1, n / std::max<std::size_t>(1, grain));
  const std::size_t chunks = std::min<std::size_t>(std::size_t(size()), max_chunks);
  if (chunks == 1 || workers_.empty() || t_running_loop) {
    fn(0, n);
    return;
  }
  std::unique_lock caller(caller_, std::try_to_lock);
  if (!caller.owns_lock()) {
    fn(0, n);
    return;
  }
  const std::size_t chunk_size = (n + chunks - 1) / chunks;
  // Publish: odd while the fields are written, even (seq_cst, for the sleepers' check below) once they are whole.
  const std::size_t generation = generation_.load(std::memory_order_relaxed);
  generation_.store(generation + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  task_.store(&fn, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  chunks_.store(chunks, std::memory_order_relaxed);
  chunk_size_.store(chunk_size, std::memory_order_relaxed);
  pending_.store(chunks - 1, std::memory_order_relaxed);
  generation_.store(generation + 2, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard lock(sleep_mutex_);  // a worker between counting itself and waiting holds it: no lost wake-up
    wake_.notify_all();
  }
  t_running_loop = true;
  run_chunk(fn, 0, std::min(n, chunk_size));
  t_running_loop = false;
  while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
  if (!failed_.load(std::memory_order_acquire)) return;  // (the usual case: no lock taken)
  std::exception_ptr failure;
  {
    std::lock_guard lock(failure_mutex_);
    failure = std::exchange(failure_, nullptr);
    failed_.store(false, std::memory_order_relaxed);
  }
  std::rethrow_exception(failure);
}

void ThreadPool::parallel_chunks(std::size_t n, std::size_t chunk, const Task& fn) {
  parallel_from_counter(n, chunk, 0, fn);
}

void ThreadPool::parallel_guided(std::size_t n, std::size_t least, const Task& fn) {
  parallel_from_counter(n, least, 2 * std::size_t(size()), fn);
}

void ThreadPool::parallel_from_counter(std::size_t n, std::size_t least, std::size_t parts, const Task& fn) {
  least = std::max<std::size_t>(1, least);
  if (n <= least) {
    if (n > 0) fn(0, n);
    return;
  }
  // One parallel_for item a thread (or all of them on the caller, where the loop runs alone): each takes chunks
  // until none is left. The loop's state is one object, so the task captures a single reference and std::function
  // holds it without a heap allocation (a decode step runs ~110 of these loops).
  struct Loop {
    std::atomic<std::size_t> next{0};
    std::size_t n, least, parts;
    const Task& fn;
  } loop{{}, n, least, parts, fn};
  parallel_for(std::min(n / least + (n % least != 0), std::size_t(size())), 1, [&loop](std::size_t, std::size_t) {
    std::size_t begin = loop.next.load(std::memory_order_relaxed);
    while (begin < loop.n) {
      const std::size_t left = loop.n - begin;
      const std::size_t take = std::min(left, std::max(loop.least, loop.parts ? left / loop.parts : 0));
      if (!loop.next.compare_exchange_weak(begin, begin + take, std::memory_order_relaxed)) continue;  // begin reloaded
      loop.fn(begin, begin + take);
      begin = loop.next.load(std::memory_order_relaxed);
    }
  });
}

void ThreadPool::run_chunk(const Task& fn, std::size_t begin, std::size_t end) {
  try {
    fn(begin, end);
  } catch (...) {
    std::lock_guard lock(failure_mutex_);
    if (!failure_) failure_ = std::current_exception();
    failed_.store(true, std::memory_order_release);
  }
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("QVL_THREADS"); env && std::atoi(env) > 0) return std::atoi(env);
    return int(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace qvl
