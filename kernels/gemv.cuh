#pragma once
// y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]) for M <= 4 (decode): f32 activations, weights of any stored type, f32
// accumulation. accumulate: y += x · wᵀ (+ bias) instead, the residual add that would follow as a kernel of its own
// (y + the product, as the unfused add computes it). Needs K a multiple of the 16-byte vector and 16-byte aligned
// rows; returns false (nothing launched) when the shape does not fit, and the caller runs a GEMM instead. overlap:
// launched to fetch its weights while the previous kernel in the stream drains (programmatic dependent launch,
// common.cuh; SM90+).
#include <cuda_runtime.h>

#include <cstdint>

#include "matmul_args.h"

namespace qvl::cuda {

// An input RMSNorm that the q+k+v and SwiGLU GEMVs fold in (w == nullptr: none): they project w ⊙ x / rms(x).
struct GemvNorm {
  const void* w = nullptr;
  WeightType type = WeightType::F32;
  float eps = 0;
};

// Whether gemv takes this shape (it returns false, launching nothing, where not).
bool gemv_fits(const float* x, const void* w, WeightType w_type, int64_t m, int64_t k);
bool gemv(const MatmulArgs& a, bool accumulate, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
