#pragma once
// Per-kernel timing: backends report each op they run (name, start, duration, bytes moved, FLOPs); the profiler
// aggregates per name (calls, total, mean, p50/p95, achieved GB/s and TFLOP/s) and exports a Chrome trace that
// Perfetto opens. Listeners get the aggregated table (the GUI coalesces those updates).
//
// Off by default: a backend without a profiler does no timing work at all.
#include <cstdint>
#include <functional>

#include "backend/kernel_timing.h"
#include <mutex>
#include <string>
#include <vector>

namespace qvl {

// The value at quantile q (0..1) of `values`, nearest rank (0 when empty): medians and tails of timings.
double percentile(std::vector<double> values, double q);
inline double median(std::vector<double> values) { return percentile(std::move(values), 0.5); }

struct KernelSummary {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0, mean_us = 0, p50_us = 0, p95_us = 0;
  double bytes = 0, flops = 0;          // totals over the calls
  double gb_per_s = 0, tflop_per_s = 0; // achieved, over the time spent in this kernel
  double share = 0;                     // of all profiled time
};

class Profiler final : public KernelTimingSink {
public:
  using Listener = std::function<void(const std::vector<KernelSummary>&)>;

  Profiler();
  void record(KernelEvent event) override;
  double now_ms() const override;  // milliseconds since the profiler was made
  // Kernels ranked by total time.
  std::vector<KernelSummary> summary() const;
  std::vector<KernelEvent> events() const;
  // {"traceEvents": [...]} in the Chrome trace format (complete events, microseconds).
  std::string chrome_trace() const;
  void clear();
  void add_listener(Listener listener);
  // Sends the current summary to the listeners (the engine calls it once per generated token).
  void publish() const;

private:
  mutable std::mutex mutex_;
  std::vector<KernelEvent> events_;
  std::vector<Listener> listeners_;
  int64_t origin_ns_;
};

}  // namespace qvl
