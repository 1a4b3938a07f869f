// A development tool, not part of the product: where a CUDA program's host time goes, for a phase bound by its
// queueing (the timeline's "between calls", timeline_summary.py). Preloaded, it samples the main thread by the wall
// clock (SIGPROF every QVL_SAMPLE_US µs, 100 by default, from a POSIX timer aimed at that thread: the process's CPU
// timer ticks only every 4 ms there) and keeps each sample's call stack; waits count too, as where the thread was
// when it waited. At exit it writes the stacks
// with the process's mappings, and host_profile.py names the frames from the libraries' symbol tables (no debug
// information needed) and sums them under a function.
//   g++ -O2 -shared -fPIC tools/trace/host_sampler.cpp -o /tmp/libhost_sampler.so
//   QVL_SAMPLES=/tmp/samples.txt LD_PRELOAD=/tmp/libhost_sampler.so build/.../qvl bench ...
//   python3 tools/trace/host_profile.py /tmp/samples.txt --under TextDecoder::run
// Under `timeout`, preload through `env` (timeout 90 env QVL_SAMPLES=... LD_PRELOAD=... qvl ...): preloaded into
// timeout itself, the sampler writes timeout's samples over the program's.
// backtrace() in a signal handler is not async-signal-safe in general; it is made safe enough here by calling it
// once before the timer starts (its unwinder is loaded then) and by dropping a sample that lands inside another.
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kDepth = 48;
constexpr int kMaxSamples = 400000;

struct Sample {
  int depth;
  void* frames[kDepth];
};

Sample* g_samples = nullptr;
std::atomic<int> g_count{0};
std::atomic<bool> g_inside{false};
timer_t g_timer{};

void on_sample(int) {
  if (g_inside.exchange(true)) return;
  const int i = g_count.load(std::memory_order_relaxed);
  if (i < kMaxSamples) {
    g_samples[i].depth = backtrace(g_samples[i].frames, kDepth);
    g_count.store(i + 1, std::memory_order_relaxed);
  }
  g_inside.store(false);
}

__attribute__((constructor)) void start() {
  if (!std::getenv("QVL_SAMPLES")) return;
  g_samples = static_cast<Sample*>(std::calloc(kMaxSamples, sizeof(Sample)));
  void* warm[2];
  backtrace(warm, 2);
  struct sigaction action {};
  action.sa_handler = on_sample;
  action.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &action, nullptr);
  const char* us = std::getenv("QVL_SAMPLE_US");
  const long period_us = std::max(1L, us ? std::atol(us) : 100L);
  const timespec period{period_us / 1000000, (period_us % 1000000) * 1000};
  sigevent event{};
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = SIGPROF;
  event._sigev_un._tid = pid_t(syscall(SYS_gettid));  // the constructor runs on the main thread
  const itimerspec every{period, period};
  if (timer_create(CLOCK_MONOTONIC, &event, &g_timer) != 0 || timer_settime(g_timer, 0, &every, nullptr) != 0)
    std::perror("host_sampler: no sampling timer");
}

__attribute__((destructor)) void finish() {
  if (!g_samples) return;
  timer_delete(g_timer);
  FILE* f = std::fopen(std::getenv("QVL_SAMPLES"), "w");
  if (!f) return;
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {  // "M start-end perms offset dev inode path"
    char line[4096];
    while (std::fgets(line, sizeof line, maps))
      if (std::strchr(line, '/')) std::fprintf(f, "M %s", line);
    std::fclose(maps);
  }
  for (int i = 0; i < g_count.load(); ++i) {
    std::fprintf(f, "S");
    for (int d = 0; d < g_samples[i].depth; ++d) std::fprintf(f, " %p", g_samples[i].frames[d]);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

}  // namespace
