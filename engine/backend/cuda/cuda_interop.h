#pragma once
// DeviceInterop on the CUDA backend: memory and timeline semaphores exported by a renderer (opaque POSIX file
// descriptors) imported with cudaImportExternalMemory / cudaImportExternalSemaphore, waits and signals queued on
// the backend's stream, and the pool map drawn by a kernel straight into the imported memory.
#include <cuda_runtime.h>

#include <map>

#include "backend/interop.h"
#include "cuda_context.h"

namespace qvl {

class CudaInterop final : public DeviceInterop {
public:
  explicit CudaInterop(CudaContext& ctx) : ctx_(ctx) {}
  ~CudaInterop() override;

  InteropHandle import_memory(int fd, uint64_t bytes, bool dedicated) override;
  InteropHandle import_timeline_semaphore(int fd) override;
  void release(InteropHandle handle) override;
  void wait(InteropHandle semaphore, uint64_t value) override;
  void signal(InteropHandle semaphore, uint64_t value) override;
  void draw_pool_map(const MemoryReport& report, const PoolMapGeometry& geometry, InteropHandle memory,
                     uint64_t offset) override;
  void copy_to(const Tensor& src, InteropHandle memory, uint64_t offset) override;

private:
  struct Memory {
    cudaExternalMemory_t external = nullptr;
    void* mapped = nullptr;
    uint64_t bytes = 0;
  };
  const Memory& memory(InteropHandle handle) const;
  cudaExternalSemaphore_t semaphore(InteropHandle handle) const;

  CudaContext& ctx_;
  InteropHandle next_handle_ = 1;
  std::map<InteropHandle, Memory> memories_;
  std::map<InteropHandle, cudaExternalSemaphore_t> semaphores_;
  Tensor table_;  // the block table on the device, grown as needed (the pool's "workspace")
};

}  // namespace qvl
