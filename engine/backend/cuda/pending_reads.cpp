#include "pending_reads.h"

#include <algorithm>
#include <cstring>

#include "common.cuh"
#include "core/error.h"

namespace qvl {

HandedBlocks::~HandedBlocks() {
  cudaDeviceSynchronize();  // no check: after a device fault every call fails, and a destructor must not throw
  for (const Block& b : blocks_) cudaFreeHost(b.host);
}

Tensor HandedBlocks::take(DType dtype, Shape shape) {
  const std::size_t bytes = std::max<std::size_t>(std::size_t(shape_numel(shape)) * dtype_size(dtype), 1);
  std::lock_guard lock(mutex_);
  auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](const Block& b) { return b.free && b.bytes == bytes; });
  if (it == blocks_.end()) {
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped));
    blocks_.push_back({static_cast<char*>(p), bytes, false});
    it = blocks_.end() - 1;
  }
  it->free = false;
  std::memset(it->host, 0, bytes);
  char* host = it->host;
  std::shared_ptr<const void> back(host, [blocks = shared_from_this()](const void* q) {
    std::lock_guard returning(blocks->mutex_);
    for (Block& b : blocks->blocks_)
      if (b.host == q) b.free = true;
  });
  return Tensor::borrow(dtype, std::move(shape), host, std::move(back));
}

bool HandedBlocks::owns(const void* p) const {
  std::lock_guard lock(mutex_);
  return std::any_of(blocks_.begin(), blocks_.end(), [&](const Block& b) {
    return !b.free && p >= b.host && static_cast<const char*>(p) < b.host + b.bytes;
  });
}

class PendingReads::Read final : public PendingRead {
public:
  Read(Slot& slot, uint64_t ticket, DType dtype, Shape shape, Tensor held)
      : slot_(slot), ticket_(ticket), dtype_(dtype), shape_(std::move(shape)), held_(std::move(held)) {}
  ~Read() override { release(); }
  Tensor get() override {
    if (slot_.holder != ticket_) fail("CUDA backend: a read collected twice");
    CUDA_CHECK(cudaEventSynchronize(slot_.done));
    Tensor h = Tensor::empty(dtype_, shape_);
    std::memcpy(h.raw(), held_.numel() ? held_.raw() : slot_.host, h.nbytes());
    release();
    return h;
  }

private:
  void release() {
    if (slot_.holder == ticket_) slot_.holder = 0;
  }
  Slot& slot_;
  uint64_t ticket_;
  DType dtype_;
  Shape shape_;
  Tensor held_;  // handed memory, read where it lies and kept alive until then; empty: read the slot's copy
};

PendingReads::PendingReads() {
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, kSlots * kSlotBytes, cudaHostAllocDefault));
  base_ = static_cast<char*>(p);
  for (int i = 0; i < kSlots; ++i) {
    slots_[std::size_t(i)].host = base_ + std::size_t(i) * kSlotBytes;
    CUDA_CHECK(cudaEventCreateWithFlags(&slots_[std::size_t(i)].done, cudaEventDisableTiming));
  }
}

PendingReads::~PendingReads() {
  // No checks: after a device fault every call fails, and a destructor must not throw. A dropped read's copy may
  // still be on its way into a slot: waited for before the memory goes.
  for (Slot& s : slots_) {
    cudaEventSynchronize(s.done);
    cudaEventDestroy(s.done);
  }
  cudaFreeHost(base_);
}

std::unique_ptr<PendingRead> PendingReads::start(const Tensor& t, cudaStream_t stream) {
  const bool copied = t.device() != Device::CPU;
  if (copied && t.nbytes() > kSlotBytes) fail("CUDA backend: a read of ", t.nbytes(), " bytes to collect later (at most ", kSlotBytes, ")");
  Slot& slot = slots_[std::size_t(next_)];
  if (slot.holder) fail("CUDA backend: ", kSlots, " reads are waiting to be collected");
  next_ = (next_ + 1) % kSlots;
  if (copied) CUDA_CHECK(cudaMemcpyAsync(slot.host, t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaEventRecord(slot.done, stream));
  slot.holder = ++reads_;
  return std::make_unique<Read>(slot, slot.holder, t.dtype(), t.shape(), copied ? Tensor() : t);
}

}  // namespace qvl
