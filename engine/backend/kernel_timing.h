#pragma once
// What a backend reports about each op it runs, and where it reports it. The runtime's Profiler implements the sink;
// a backend without a sink does no timing work at all.
#include <chrono>
#include <string>

namespace qvl {

struct KernelEvent {
  std::string name;        // op and shape, e.g. "linear 2048x6144 bf16"
  double start_ms = 0;     // on the sink's clock
  double duration_ms = 0;
  double bytes = 0, flops = 0;
};

class KernelTimingSink {
public:
  virtual ~KernelTimingSink() = default;
  virtual void record(KernelEvent event) = 0;
  virtual double now_ms() const = 0;
};

// Times a host-side op (the CPU backend): the whole scope, on the host clock. `describe` (name, bytes, FLOPs) is
// only called while timing is on.
class ScopedKernelTimer {
public:
  template <typename Describe>
  ScopedKernelTimer(KernelTimingSink* sink, Describe describe) : sink_(sink) {
    if (!sink_) return;
    event_ = describe();
    event_.start_ms = sink_->now_ms();
  }
  ~ScopedKernelTimer() {
    if (!sink_) return;
    event_.duration_ms = sink_->now_ms() - event_.start_ms;
    sink_->record(std::move(event_));
  }
  ScopedKernelTimer(const ScopedKernelTimer&) = delete;
  ScopedKernelTimer& operator=(const ScopedKernelTimer&) = delete;

private:
  KernelTimingSink* sink_;
  KernelEvent event_;
};

}  // namespace qvl
