#pragma once
// A fixed pool of worker threads for data-parallel loops. parallel_for splits [0, n) into contiguous chunks, one
// per thread (the caller takes the first): a fixed share a thread; parallel_chunks hands out smaller chunks from a
// counter, so a thread that runs ahead takes more (the CPU's prefill products take their weight rows so), and
// parallel_guided chunks that shrink as the loop goes (a decode's products: long runs first, short ones last).
//
// A decode step runs ~600 short parallel loops, so handing a loop over must cost a few hundred nanoseconds, not
// microseconds. Waking a sleeping thread costs tens of microseconds (measured as ~15% of a 2B decode step), so
// workers spin for a short while after each loop before they sleep; and a spinning worker takes its loop without a
// lock (a seqlock over the loop's description): sixteen workers that took one mutex in turn after every hand-over
// queued on it.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qvl {

// The least work (multiply-adds or elements) worth handing to another thread: a hand-over costs microseconds.
constexpr std::size_t kMinChunkWork = 1 << 16;

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
  // A chunk that throws (on any thread) fails the loop: the first exception is rethrown here once every chunk has
  // finished.
  void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn);
  // Runs fn(begin, end) over [0, n) in chunks of `chunk` items (the last one shorter), each taken from a shared
  // counter by whichever thread is free: a loop ends when its last chunk does, not when its slowest thread's fixed
  // share does. For loops whose threads run at uneven speeds (a virtual machine's cores, memory-bound streams that
  // share the memory unevenly). One chunk runs on the caller alone; otherwise as parallel_for (a second caller, a
  // throwing chunk).
  void parallel_chunks(std::size_t n, std::size_t chunk, const std::function<void(std::size_t, std::size_t)>& fn);
  // As parallel_chunks, but the chunks shrink as the loop goes (guided scheduling): each taken chunk is a
  // 2·size()-th of what is left, never fewer than `least` items (the last one excepted). A thread's first chunks are
  // long runs of memory for the prefetchers, and the last ones short enough to even the threads out. (A thread that
  // stalls on a first chunk still holds the loop up by that chunk: a 2·size()-th of it.)
  void parallel_guided(std::size_t n, std::size_t least, const std::function<void(std::size_t, std::size_t)>& fn);

  // The process-wide pool, sized to the machine ($QVL_THREADS overrides).
  static ThreadPool& global();

private:
  using Task = std::function<void(std::size_t, std::size_t)>;
  struct Chunk {
    const Task* task = nullptr;
    std::size_t begin = 0, end = 0;
    std::size_t generation = 0;  // the loop it belongs to (even)
  };
  // The newest loop's chunk for worker `index`, once the loop's description has been read whole; false while the
  // caller is writing a new one or none is newer than `seen`.
  bool read_chunk(std::size_t index, std::size_t seen, Chunk& chunk) const;
  void worker_loop(std::size_t index);
  // fn(begin, end), its exception kept in failure_ (the first of the loop's) instead of thrown: out of a worker it
  // would end the process, and out of the caller's own chunk it would leave the workers running the loop on a stack
  // frame that is gone.
  void run_chunk(const Task& fn, std::size_t begin, std::size_t end);
  // parallel_chunks (parts 0: every chunk `least` items) and parallel_guided (a parts-th of what is left, at least
  // `least`): chunks taken from a shared counter by whichever thread is free.
  void parallel_from_counter(std::size_t n, std::size_t least, std::size_t parts, const Task& fn);

  std::vector<std::thread> workers_;
  std::mutex caller_;  // held by the caller whose loop the workers run
  // The loop's description, a seqlock: generation_ is odd while the caller writes the fields and even (one more)
  // once they are whole. A worker reads the fields between two equal even generations. The fields are atomics read
  // and written relaxed (the generation's release/acquire orders them).
  alignas(64) std::atomic<std::size_t> generation_{0};
  std::atomic<const Task*> task_{nullptr};
  std::atomic<std::size_t> n_{0}, chunks_{0}, chunk_size_{0};
  // Chunks of the running loop the workers have not finished; on a line of its own, so their decrements do not take
  // the polled generation's line away from the spinning workers.
  alignas(64) std::atomic<std::size_t> pending_{0};
  // Sleeping: a worker counts itself in sleepers_ before it waits on wake_; the caller, after publishing, notifies
  // only when someone may sleep (both sides sequentially consistent, so one of them sees the other).
  alignas(64) std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex failure_mutex_;
  std::exception_ptr failure_;     // the running loop's first exception
  std::atomic<bool> failed_{false};  // failure_ is set: the caller takes the mutex only then
};

}  // namespace qvl
