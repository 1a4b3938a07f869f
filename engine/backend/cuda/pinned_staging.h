#pragma once
// Page-locked host memory between the host and the GPU. Copies from pageable memory are synchronous and run at
// half speed; staged through pinned memory they are asynchronous on the backend's stream (so host work overlaps the
// GPU) and can be recorded into a CUDA graph. A ring: a region is reused once the copy that read it has finished
// (an event recorded after it); large uploads go in chunks so filling chunk i+1 overlaps the transfer of chunk i.
#include <cuda_runtime.h>

#include <cstddef>
#include <deque>
#include <vector>

namespace qvl {

class PinnedStaging {
public:
  explicit PinnedStaging(std::size_t capacity);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Host -> device on `stream`; `src` may be reused as soon as this returns.
  void upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
  // Device -> host: waits for the stream.
  void download(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

private:
  struct Region {
    std::size_t begin, end;
    cudaEvent_t done;
  };
  char* reserve(std::size_t bytes);  // waits for the copies that still read the space it returns
  void retire_front(bool wait);
  cudaEvent_t take_event();

  char* base_ = nullptr;
  std::size_t capacity_ = 0, head_ = 0;
  std::deque<Region> in_flight_;  // oldest first
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace qvl
