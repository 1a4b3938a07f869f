#pragma once
// Shared by every kernel: error checks that say where a CUDA call failed, and capability switches.
#include <cuda_runtime.h>

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
// the graph read that kernel's output before it was written (barrier.cuh ends the recording).
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

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
                   bool overlap, Args... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = overlap ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

}  // namespace qvl::cuda

// bf16 arithmetic and tensor cores exist from SM80/SM70; Pascal (SM61) code paths use f32 math on f16/f32 storage.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define QVL_HAS_BF16_MATH 1
#else
#define QVL_HAS_BF16_MATH 0
#endif
