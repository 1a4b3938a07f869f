#pragma once
// Fused residual add + RMSNorm: x += residual; y = w ⊙ x / rms(x). Unfused, the add writes x and the norm reads it
// back: 5 row passes over global memory (read x, r; write x; read x; write y). Fused: 4, and one launch instead of
// two — at decode (one 2048-wide row) the launch and the dependency gap are the cost, not the bytes.
#include <cuda_runtime.h>

#include <cstdint>

#include "norm.cuh"

namespace qvl::cuda {

// y must not alias x or the residual; it is f32 or a 16-bit GEMM operand (y_type, as in norm.cuh).
void add_rms_norm(const RowNormArgs& a, cudaStream_t stream);

}  // namespace qvl::cuda
