#pragma once
// The SwiGLU MLP's first half at decode: y[M, N] = silu(x · gateᵀ) ⊙ (x · upᵀ) for M <= 4, gate and up [N, K] of the
// same stored type. One warp streams a row of both matrices, so twice the bytes are in flight per warp and the
// gate/up results never leave registers: one launch instead of three (two GEMVs and silu_mul). Ask `fits` first:
// other shapes (K not a multiple of the 16-byte vector, unaligned rows, M > 4; normed, M·K floats over 48 KB) take
// the unfused ops. norm: the input RMSNorm folded in, overlap as in gemv (gemv.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "gemv.cuh"

namespace qvl::cuda {

bool gemv_swiglu_fits(const float* x, const void* gate, const void* up, WeightType w_type, int64_t m, int64_t k,
                      bool normed);
// gate: x, the gate matrix (its bias unused), y, m, n, k; up: the up matrix, of the gate's type and shape.
void gemv_swiglu(const MatmulArgs& gate, const void* up, const GemvNorm& norm, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
