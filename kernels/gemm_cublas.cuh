#pragma once
// y[M, N] = x[M, K] · w[N, K]ᵀ through cuBLAS: 16-bit weights meet activations narrowed to the same type on tensor
// cores with f32 accumulation and an f32 result; f32 weights run cuBLAS's f32 GEMM (no TF32, so results stay
// within f32 rounding of the CPU reference). The bias, if any, is a separate pass (convert.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

class CublasGemm {
public:
  explicit CublasGemm(cudaStream_t stream);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // x_narrow: device scratch of M·K elements of w_type (unused for f32 weights); x == nullptr: x_narrow already holds
  // the activations in w_type (a norm wrote them so), and no conversion runs.
  void run(const float* x, void* x_narrow, const void* w, WeightType w_type, float* y, int64_t m, int64_t n, int64_t k);
  // `count` products of one shape in one launch, y_i = x_i · w_iᵀ, the activations already in w_type: `pointers` (on
  // the device) holds the count weights, then the count activations, then the count f32 outputs.
  void run_batched(const void* const* pointers, int count, WeightType w_type, int64_t m, int64_t n, int64_t k);

private:
  void* handle_ = nullptr;  // cublasHandle_t, kept out of this header
  cudaStream_t stream_;
};

}  // namespace qvl::cuda
