#pragma once
// What the matrix-product entry points take (gemv.cuh, gemv_swiglu.cuh, gemm_tiled.cuh): y[M, N] = x[M, K] · w[N, K]ᵀ
// (+ bias[N]) with f32 activations and weights (and bias) in their stored type. Plain C++: the backend fills it.
#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

struct MatmulArgs {
  const float* x = nullptr;
  const void* w = nullptr;
  WeightType w_type = WeightType::F32;
  const void* bias = nullptr;  // optional
  WeightType bias_type = WeightType::F32;
  float* y = nullptr;
  int64_t m = 0, n = 0, k = 0;
};

}  // namespace qvl::cuda
