#pragma once
// Small copies to the host collected later (Backend::read_later): a decode step's pick, read while the next step is
// already queued behind it. A few page-locked slots, each with an event; a slot is taken again once its read was
// collected or dropped (a dropped read's copy may still land: the next copy into the slot is queued after it). Host
// memory the device writes (CudaBackend::alloc_handed) takes a slot's event only: read where it lies, once the work
// queued before is done.
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace qvl {

class PendingReads {
public:
  static constexpr int kSlots = 4;
  static constexpr std::size_t kSlotBytes = 4096;  // a pick (16 bytes) or a sampled one (top-k's candidates and the draw: 2,080)
  PendingReads();
  ~PendingReads();
  PendingReads(const PendingReads&) = delete;
  PendingReads& operator=(const PendingReads&) = delete;

  // Queues the copy of `t` (on the device: at most kSlotBytes) on `stream`. Throws where every slot holds an
  // uncollected read.
  std::unique_ptr<PendingRead> start(const Tensor& t, cudaStream_t stream);

private:
  struct Slot {
    char* host = nullptr;
    const void* source = nullptr;  // what get() reads: `host`, or the handed memory itself
    cudaEvent_t done = nullptr;
    uint64_t holder = 0;  // the read that holds the slot (0: none)
  };
  class Read;
  char* base_ = nullptr;
  std::array<Slot, kSlots> slots_{};
  int next_ = 0;
  uint64_t reads_ = 0;
};

}  // namespace qvl
