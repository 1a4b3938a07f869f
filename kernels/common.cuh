#pragma once
// Shared by every kernel: error checks that say where a CUDA call failed, and capability switches.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "block_timeline.cuh"

namespace qvl::cuda {

struct CudaError : std::runtime_error {
  cudaError_t code;
  CudaError(cudaError_t c, const std::string& what) : std::runtime_error(what), code(c) {}
};

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* expr, const char* file, int line) {
  throw CudaError(code, std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                            cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")");
}

}  // namespace qvl::cuda

// Every runtime call goes through CUDA_CHECK; every launch is followed by CUDA_CHECK_LAUNCH, which catches bad
// launch configurations and "no kernel image for this device" at the launch site rather than at the next sync.
#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t qvl_status_ = (expr);                                               \
    if (qvl_status_ != cudaSuccess) ::qvl::cuda::throw_cuda_error(qvl_status_, #expr, __FILE__, __LINE__); \
  } while (0)
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace qvl::cuda {

// Programmatic dependent launch (SM90+). A kernel launched with overlap = true may start while the kernel before it
// in the stream drains (as that kernel's blocks finish); it must call wait_for_previous_kernel() before it touches
// memory the previous kernel writes or reads: the wait returns once that kernel has finished and its writes are
// visible (without the launch attribute it returns at once). Decode kernels fetch their weights, which nothing
// writes, before they wait. allow_next_kernel() lets the next overlapped kernel start once every block of this one
// has run it (it then waits on its own). A recorded CUDA graph must not end with a kernel that did: the copy after
// the graph read that kernel's output before it was written (a plain kernel ends the recording: barrier.cuh).
__device__ __forceinline__ void allow_next_kernel() {
  QVL_BLOCK_STAMP(0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  QVL_BLOCK_STAMP(1);
}

// A launch with programmatic dependent launch (`overlap`) and, where `cluster` > 1, thread block clusters of
// `cluster` consecutive blocks along x (SM90+; the caller checks that they fit: cluster_fits).
template <typename... Params, typename... Args>
void launch_kernel_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
                             bool overlap, unsigned cluster, Args... args) {
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (overlap) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
                   bool overlap, Args... args) {
  launch_kernel_clustered(kernel, grid, block, shared, stream, overlap, 1u, args...);
}

// Whether `clusters` clusters of `cluster` blocks of `kernel` (`threads` a block) are all resident at once on the
// current device: SM90 or newer with the kernel compiled for it, at most 8 blocks a cluster (the portable size; on an
// H200 the larger ones fit fewer: 7 clusters of 12 or of 16 whole-SM blocks against 15 of 8), and
// cudaOccupancyMaxActiveClusters says so (a cluster lies within one GPC, so fewer fit than the SMs over the cluster
// size). Asked once per kernel and size (common.cu).
bool cluster_fits(const void* kernel, int threads, unsigned cluster, int64_t clusters);

}  // namespace qvl::cuda

// bf16 arithmetic and tensor cores exist from SM80/SM70; Pascal (SM61) code paths use f32 math on f16/f32 storage.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define QVL_HAS_BF16_MATH 1
#else
#define QVL_HAS_BF16_MATH 0
#endif
