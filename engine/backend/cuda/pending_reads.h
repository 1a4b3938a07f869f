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
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace qvl {

// Page-locked host memory mapped for the device, which kernels write (CudaBackend::alloc_handed: a decode step's
// pick, StepHandoff). A block whose last tensor is gone comes back here and is handed out again; blocks are freed
// only with the last tensor and the backend both gone, after the device is idle: a dropped step's graph may still
// write into its block, and it must not land in memory given to anything else.
class HandedBlocks : public std::enable_shared_from_this<HandedBlocks> {
public:
  ~HandedBlocks();
  Tensor take(DType dtype, Shape shape);
  bool owns(const void* p) const;  // memory of a block handed out (read_later reads it where it lies)

private:
  struct Block {
    char* host = nullptr;
    std::size_t bytes = 0;
    bool free = false;
  };
  mutable std::mutex mutex_;  // blocks come back from whichever thread drops the last tensor
  std::vector<Block> blocks_;
};

class PendingReads {
public:
  static constexpr int kSlots = 4;
  static constexpr std::size_t kSlotBytes = 4096;  // a pick (16 bytes) or a sampled one (top-k's candidates and the draw: 2,080)
  PendingReads();
  ~PendingReads();
  PendingReads(const PendingReads&) = delete;
  PendingReads& operator=(const PendingReads&) = delete;

  // Queues the copy of `t` (on the device: at most kSlotBytes; or handed memory, read where it lies and held by the
  // read) on `stream`. Throws where every slot holds an uncollected read.
  std::unique_ptr<PendingRead> start(const Tensor& t, cudaStream_t stream);

private:
  struct Slot {
    char* host = nullptr;
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
