#pragma once
// Fused residual add + LayerNorm (the vision tower's blocks): x += residual (+ residual_bias: the bias of the GEMM
// that made the residual, added here instead of by a kernel of its own); y = w ⊙ (x − mean) / std + b. Unfused,
// the add writes x and the norm reads it back twice (mean, then variance and output); fused, the summed row stays
// in registers: one launch instead of two and 4 row passes over global memory instead of 6.
#include <cuda_runtime.h>

#include <cstdint>

#include "norm.cuh"

namespace qvl::cuda {

// y must not alias x or the residual; it is f32 or a 16-bit GEMM operand (y_type, as in norm.cuh). residual_bias may
// be null.
void add_layer_norm(const RowNormArgs& a, cudaStream_t stream);

}  // namespace qvl::cuda
