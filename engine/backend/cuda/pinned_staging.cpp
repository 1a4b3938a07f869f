#include "pinned_staging.h"

#include <algorithm>
#include <cstring>

#include "common.cuh"

namespace qvl {

PinnedStaging::PinnedStaging(std::size_t capacity) : capacity_(capacity) {
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, capacity, cudaHostAllocDefault));
  base_ = static_cast<char*>(p);
}

PinnedStaging::~PinnedStaging() {
  // No checks: after a device fault every call fails, and a destructor must not throw.
  for (const Region& r : in_flight_) cudaEventDestroy(r.done);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  cudaFreeHost(base_);
}

cudaEvent_t PinnedStaging::take_event() {
  if (free_events_.empty()) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  cudaEvent_t e = free_events_.back();
  free_events_.pop_back();
  return e;
}

void PinnedStaging::retire_front(bool wait) {
  const Region r = in_flight_.front();
  if (wait) CUDA_CHECK(cudaEventSynchronize(r.done));
  in_flight_.pop_front();
  free_events_.push_back(r.done);
}

char* PinnedStaging::reserve(std::size_t bytes) {
  while (!in_flight_.empty() && cudaEventQuery(in_flight_.front().done) == cudaSuccess) retire_front(false);
  std::size_t start = (head_ + 15) / 16 * 16;
  if (start + bytes > capacity_) start = 0;  // wrap; the tail stays unused this lap
  const auto in_the_way = [&] {
    return std::any_of(in_flight_.begin(), in_flight_.end(),
                       [&](const Region& r) { return r.begin < start + bytes && start < r.end; });
  };
  while (in_the_way()) retire_front(true);  // one stream: when a region is done, all older ones are too
  head_ = start + bytes;
  return base_ + start;
}

void PinnedStaging::upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  const std::size_t chunk = capacity_ / 4;
  for (std::size_t at = 0; at < bytes; at += chunk) {
    const std::size_t n = std::min(chunk, bytes - at);
    char* staged = reserve(n);
    std::memcpy(staged, static_cast<const char*>(src) + at, n);
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + at, staged, n, cudaMemcpyHostToDevice, stream));
    const cudaEvent_t done = take_event();
    CUDA_CHECK(cudaEventRecord(done, stream));
    in_flight_.push_back({std::size_t(staged - base_), std::size_t(staged - base_) + n, done});
  }
}

void PinnedStaging::download(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  const std::size_t chunk = capacity_ / 4;
  for (std::size_t at = 0; at < bytes; at += chunk) {
    const std::size_t n = std::min(chunk, bytes - at);
    char* staged = reserve(n);
    CUDA_CHECK(cudaMemcpyAsync(staged, static_cast<const char*>(src) + at, n, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::memcpy(static_cast<char*>(dst) + at, staged, n);
  }
  while (!in_flight_.empty()) retire_front(false);  // the stream is idle: every earlier copy has finished
}

}  // namespace qvl
