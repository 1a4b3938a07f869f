#pragma once
// Shared by every kernel: error checks that say where a CUDA call failed, and capability switches.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

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

// bf16 arithmetic and tensor cores exist from SM80/SM70; Pascal (SM61) code paths use f32 math on f16/f32 storage.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define QVL_HAS_BF16_MATH 1
#else
#define QVL_HAS_BF16_MATH 0
#endif
