#pragma once
// Per-kernel timing on the GPU: a pair of events recorded in the stream around each op, read later (collect), so
// timing never waits for the GPU. GPU time zero is the sink's clock when the sink was set.
#include <cuda_runtime.h>

#include <vector>

#include "backend/kernel_timing.h"

namespace qvl {

class CudaEventTimer {
public:
  explicit CudaEventTimer(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventTimer();
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;

  // Hands over what is pending to the old sink (waiting for it), then starts the clock for `sink` (nullptr: off).
  void set_sink(KernelTimingSink* sink);
  KernelTimingSink* sink() const { return sink_; }
  // Hands finished events to the sink (wait: all of them).
  void collect(bool wait);

private:
  friend class GpuTimer;
  cudaEvent_t take_event();
  struct Pending {
    KernelEvent event;
    cudaEvent_t start, end;
  };
  cudaStream_t stream_;
  KernelTimingSink* sink_ = nullptr;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  cudaEvent_t reference_ = nullptr;
  double reference_ms_ = 0;
};

// Times the scope it lives in (one op); `describe` (name, bytes, FLOPs) is only called while timing is on.
class GpuTimer {
public:
  template <typename Describe> GpuTimer(CudaEventTimer& timer, Describe describe) {
    if (!timer.sink_) return;
    timer_ = &timer;
    event_ = describe();
    start_ = timer.take_event();
    record_start();
  }
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;

private:
  void record_start();
  CudaEventTimer* timer_ = nullptr;
  KernelEvent event_;
  cudaEvent_t start_ = nullptr;
};

}  // namespace qvl
