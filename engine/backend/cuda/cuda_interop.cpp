#include "cuda_interop.h"

#include <cstring>

#include "common.cuh"
#include "core/error.h"
#include "pool_map.cuh"

namespace qvl {

namespace {

// A failed import leaves the descriptor with the caller (the driver takes it only on success).
void check_import(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  fail("CUDA interop: ", what, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

// Appends `values` to `bytes` at an 8-byte boundary and returns where they start.
template <typename T> size_t append(std::vector<uint8_t>& bytes, const std::vector<T>& values) {
  const size_t at = (bytes.size() + 7) / 8 * 8;
  bytes.resize(at + values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(bytes.data() + at, values.data(), values.size() * sizeof(T));
  return at;
}

}  // namespace

CudaInterop::~CudaInterop() {
  cudaStreamSynchronize(ctx_.stream);
  for (auto& [handle, m] : memories_) {
    cudaFree(m.mapped);
    cudaDestroyExternalMemory(m.external);
  }
  for (auto& [handle, s] : semaphores_) cudaDestroyExternalSemaphore(s);
}

InteropHandle CudaInterop::import_memory(int fd, uint64_t bytes, bool dedicated) {
  if (bytes == 0) fail("CUDA interop: cannot import an empty allocation");
  cudaExternalMemoryHandleDesc desc{};
  desc.type = cudaExternalMemoryHandleTypeOpaqueFd;
  desc.handle.fd = fd;
  desc.size = bytes;
  desc.flags = dedicated ? cudaExternalMemoryDedicated : 0;
  Memory m;
  m.bytes = bytes;
  check_import(cudaImportExternalMemory(&m.external, &desc), "importing memory (cudaImportExternalMemory)");
  cudaExternalMemoryBufferDesc buffer{};
  buffer.size = bytes;
  const cudaError_t mapped = cudaExternalMemoryGetMappedBuffer(&m.mapped, m.external, &buffer);
  if (mapped != cudaSuccess) {
    cudaDestroyExternalMemory(m.external);  // the descriptor went with the import
    check_import(mapped, "mapping imported memory (cudaExternalMemoryGetMappedBuffer)");
  }
  memories_.emplace(next_handle_, m);
  return next_handle_++;
}

InteropHandle CudaInterop::import_timeline_semaphore(int fd) {
  cudaExternalSemaphoreHandleDesc desc{};
  desc.type = cudaExternalSemaphoreHandleTypeTimelineSemaphoreFd;
  desc.handle.fd = fd;
  cudaExternalSemaphore_t s = nullptr;
  check_import(cudaImportExternalSemaphore(&s, &desc), "importing a timeline semaphore (cudaImportExternalSemaphore)");
  semaphores_.emplace(next_handle_, s);
  return next_handle_++;
}

void CudaInterop::release(InteropHandle handle) {
  CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));  // rare (a view closing): the queued work may still use it
  if (auto m = memories_.find(handle); m != memories_.end()) {
    cudaFree(m->second.mapped);
    cudaDestroyExternalMemory(m->second.external);
    memories_.erase(m);
  } else if (auto s = semaphores_.find(handle); s != semaphores_.end()) {
    cudaDestroyExternalSemaphore(s->second);
    semaphores_.erase(s);
  }
}

const CudaInterop::Memory& CudaInterop::memory(InteropHandle handle) const {
  const auto it = memories_.find(handle);
  if (it == memories_.end()) fail("CUDA interop: no imported memory ", handle);
  return it->second;
}

cudaExternalSemaphore_t CudaInterop::semaphore(InteropHandle handle) const {
  const auto it = semaphores_.find(handle);
  if (it == semaphores_.end()) fail("CUDA interop: no imported semaphore ", handle);
  return it->second;
}

void CudaInterop::wait(InteropHandle handle, uint64_t value) {
  const cudaExternalSemaphore_t s = semaphore(handle);
  cudaExternalSemaphoreWaitParams params{};
  params.params.fence.value = value;
  CUDA_CHECK(cudaWaitExternalSemaphoresAsync(&s, &params, 1, ctx_.stream));
}

void CudaInterop::signal(InteropHandle handle, uint64_t value) {
  const cudaExternalSemaphore_t s = semaphore(handle);
  cudaExternalSemaphoreSignalParams params{};
  params.params.fence.value = value;
  CUDA_CHECK(cudaSignalExternalSemaphoresAsync(&s, &params, 1, ctx_.stream));
}

void CudaInterop::copy_to(const Tensor& src, InteropHandle handle, uint64_t offset) {
  const Memory& target = memory(handle);
  if (offset > target.bytes || src.nbytes() > target.bytes - offset)
    fail("CUDA interop: ", src.nbytes(), " bytes at byte ", offset, " do not fit the imported ", target.bytes, " bytes");
  auto* dst = static_cast<uint8_t*>(target.mapped) + offset;
  if (src.device() == Device::CUDA)
    CUDA_CHECK(cudaMemcpyAsync(dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, ctx_.stream));
  else
    ctx_.stage(dst, src.raw(), src.nbytes());  // a host tensor (a layer on the CPU) through the staging ring
}

void CudaInterop::draw_pool_map(const MemoryReport& report, const PoolMapGeometry& geometry, InteropHandle handle,
                                uint64_t offset) {
  check_pool_map_geometry(geometry);
  const Memory& target = memory(handle);
  const uint64_t pixels = uint64_t(geometry.width) * geometry.height;
  if (offset > target.bytes || pixels > target.bytes - offset)
    fail("CUDA interop: a ", geometry.width, "x", geometry.height, " pool map at byte ", offset,
         " does not fit the imported ", target.bytes, " bytes");
  // The table travels as one upload through the staging ring (asynchronous, like every host copy here).
  const PoolMapTable table = pool_map_table(report);
  std::vector<uint8_t> bytes;
  const size_t bar_ends = append(bytes, table.bar_ends), bar_codes = append(bytes, table.bar_codes);
  const size_t sizes = append(bytes, table.segment_sizes), firsts = append(bytes, table.segment_first_block);
  const size_t offsets = append(bytes, table.block_offsets), codes = append(bytes, table.block_codes);
  if (!table_.defined() || table_.nbytes() < bytes.size())
    table_ = ctx_.device_tensor(DType::U8, {int64_t(bytes.size() * 2)}, pool::Owner::Workspace);
  ctx_.stage(table_.raw(), bytes.data(), bytes.size());

  auto* base = static_cast<uint8_t*>(table_.raw());
  cuda::PoolMapArgs args;
  args.out = static_cast<uint8_t*>(target.mapped) + offset;
  args.width = geometry.width;
  args.height = geometry.height;
  args.bar_height = geometry.bar_height;
  args.bar_scale = table.bar_scale;
  args.bar_ends = reinterpret_cast<const int64_t*>(base + bar_ends);
  args.bar_codes = base + bar_codes;
  args.bar_parts = static_cast<int>(table.bar_ends.size());
  args.segment_sizes = reinterpret_cast<const int64_t*>(base + sizes);
  args.segment_first_block = reinterpret_cast<const int32_t*>(base + firsts);
  args.segments = static_cast<int>(table.segment_sizes.size());
  args.block_offsets = reinterpret_cast<const int64_t*>(base + offsets);
  args.block_codes = base + codes;
  args.largest_segment = table.largest_segment;
  cuda::draw_pool_map(args, ctx_.stream);
}

}  // namespace qvl
