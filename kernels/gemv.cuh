#pragma once
// y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]) for M <= 4 (decode): f32 activations, weights of any stored type, f32
// accumulation. Needs K a multiple of the 16-byte vector and 16-byte aligned rows; returns false (nothing launched)
// when the shape does not fit, and the caller runs a GEMM instead.
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

bool gemv(const float* x, const void* w, WeightType w_type, const void* bias, WeightType bias_type, float* y, int64_t m,
          int64_t n, int64_t k, cudaStream_t stream);

}  // namespace qvl::cuda
