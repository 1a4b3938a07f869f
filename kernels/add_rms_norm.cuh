#pragma once
// Fused residual add + RMSNorm: x += residual; y = w ⊙ x / rms(x). Unfused, the add writes x and the norm reads it
// back: 5 row passes over global memory (read x, r; write x; read x; write y). Fused: 4, and one launch instead of
// two — at decode (one 2048-wide row) the launch and the dependency gap are the cost, not the bytes.
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

// y must not alias x or the residual; it is f32 or a 16-bit GEMM operand (y_type, as in norm.cuh).
void add_rms_norm(float* x, const float* residual, const void* w, WeightType w_type, float eps, void* y,
                  WeightType y_type, int64_t rows, int64_t width, cudaStream_t stream);

}  // namespace qvl::cuda
