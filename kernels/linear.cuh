#pragma once
// y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]); f32 activations, weights of any stored type, f32 accumulation.
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

void linear(const float* x, const void* w, WeightType w_type, const void* bias, WeightType bias_type, float* y,
            int64_t m, int64_t n, int64_t k, cudaStream_t stream);

}  // namespace qvl::cuda
