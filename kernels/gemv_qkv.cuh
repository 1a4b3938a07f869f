#pragma once
// The attention's input projections at decode in one launch: q = x · wqᵀ, k = x · wkᵀ, v = x · wvᵀ (+ biases) for
// M <= 4, the three matrices of the same K and stored type. Separately the 2B model's q (8 MB) and k/v (4 MB) GEMVs
// reach 0.85 and 0.50 TB/s on an H100: each is too small to amortise a launch and its ramp-up. Ask `fits` first:
// other shapes take three linears. norm: the input RMSNorm folded in (gemv.cuh; normed, M·K floats must fit 48 KB); overlap as in gemv.
#include <cuda_runtime.h>

#include <cstdint>

#include "gemv.cuh"

namespace qvl::cuda {

struct QkvProjection {
  const void* w[3];     // q, k, v weights [n_i, K]
  const void* bias[3];  // optional, bias_type
  float* y[3];          // [M, n_i]
  int64_t n[3];
};

bool gemv_qkv_fits(const float* x, const QkvProjection& p, WeightType w_type, int64_t m, int64_t k, bool normed);
void gemv_qkv(const float* x, const QkvProjection& p, WeightType w_type, WeightType bias_type, int64_t m, int64_t k,
              const GemvNorm& norm, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
