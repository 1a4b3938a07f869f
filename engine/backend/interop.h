#pragma once
// A device backend's memory shared with a renderer (Vulkan/CUDA interop), as a facet of the backend
// (Backend::interop(); nullptr where there is none). The renderer allocates memory and timeline semaphores in its
// own API, exports them as POSIX file descriptors (opaque FD handles) and the backend imports them; the backend then
// draws pictures straight into that memory on its own stream, in order with the model's work, and signals the
// renderer. Only file descriptors and numbers cross this line: the engine knows nothing of Vulkan, the renderer
// nothing of CUDA.
#include <cstdint>

#include "backend/pool_picture.h"

namespace qvl {

using InteropHandle = int64_t;

class DeviceInterop {
public:
  virtual ~DeviceInterop() = default;
  // Imports `bytes` of exported memory (the size the exporter allocated; `dedicated`: it is a dedicated allocation,
  // which the importer must be told) or a timeline semaphore. On success the backend owns `fd` (the driver closes
  // it); on failure it throws qvl::Error and the caller still owns it.
  virtual InteropHandle import_memory(int fd, uint64_t bytes, bool dedicated) = 0;
  virtual InteropHandle import_timeline_semaphore(int fd) = 0;
  // Forgets an import after the work queued so far that uses it.
  virtual void release(InteropHandle handle) = 0;
  // Queued on the backend's stream: the work queued after wait() starts once `semaphore` reaches `value`; signal()
  // sets it to `value` once the work queued before it is done.
  virtual void wait(InteropHandle semaphore, uint64_t value) = 0;
  virtual void signal(InteropHandle semaphore, uint64_t value) = 0;
  // Draws `report`'s pool (memory_report(true)) into imported memory at `offset`: width * height codes, exactly
  // what draw_pool_map gives on the host, computed by a kernel from the block table.
  virtual void draw_pool_map(const MemoryReport& report, const PoolMapGeometry& geometry, InteropHandle memory,
                             uint64_t offset) = 0;
  // Copies a tensor of this backend or of the host (an AttentionFrame's heat) into imported memory at `offset`, on
  // the stream.
  virtual void copy_to(const Tensor& src, InteropHandle memory, uint64_t offset) = 0;
};

}  // namespace qvl
