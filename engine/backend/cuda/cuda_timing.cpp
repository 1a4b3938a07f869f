#include "cuda_timing.h"

#include "common.cuh"

namespace qvl {

CudaEventTimer::~CudaEventTimer() {
  try {
    collect(true);
  } catch (const std::exception&) {  // a faulted device fails every call; the destructor must not throw
  }
  for (const Pending& p : pending_) cudaEventDestroy(p.start), cudaEventDestroy(p.end);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (reference_) cudaEventDestroy(reference_);
}

void CudaEventTimer::set_sink(KernelTimingSink* sink) {
  collect(true);
  if (sink) {  // everything that can fail before the sink is taken: a failure leaves timing as it was
    if (!reference_) CUDA_CHECK(cudaEventCreate(&reference_));
    CUDA_CHECK(cudaEventRecord(reference_, stream_));  // GPU time zero = the sink's clock now
    reference_ms_ = sink->now_ms();
  }
  cuda::block_timeline_pause(sink != nullptr, stream_);  // a development tool (block_timeline.cuh): else nothing
  sink_ = sink;
}

void CudaEventTimer::collect(bool wait) {
  std::size_t done = 0;
  for (; done < pending_.size(); ++done) {
    Pending& p = pending_[done];
    if (wait) CUDA_CHECK(cudaEventSynchronize(p.end));
    else if (cudaEventQuery(p.end) == cudaErrorNotReady) break;
    float offset = 0, duration = 0;
    CUDA_CHECK(cudaEventElapsedTime(&offset, reference_, p.start));
    CUDA_CHECK(cudaEventElapsedTime(&duration, p.start, p.end));
    p.event.start_ms = reference_ms_ + offset;
    p.event.duration_ms = duration;
    if (sink_) sink_->record(std::move(p.event));
    free_events_.push_back(p.start);
    free_events_.push_back(p.end);
  }
  pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(done));
}

cudaEvent_t CudaEventTimer::take_event() {
  if (free_events_.empty()) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  cudaEvent_t e = free_events_.back();
  free_events_.pop_back();
  return e;
}

void GpuTimer::record_start() { CUDA_CHECK(cudaEventRecord(start_, timer_->stream_)); }

GpuTimer::~GpuTimer() {
  if (!timer_) return;
  cudaEvent_t end = timer_->take_event();
  if (cudaEventRecord(end, timer_->stream_) == cudaSuccess) timer_->pending_.push_back({std::move(event_), start_, end});
}

}  // namespace qvl
