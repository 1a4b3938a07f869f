#pragma once
// Element-wise ops on f32: residual add, SiLU(gate)·up, GELU (tanh approximation and exact erf).
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

enum class Elementwise : int { Add, SiluMul, GeluTanh, GeluErf };

// y = op(a, b); b is ignored by the GELUs. y is f32 (it may alias a) or, y_type 16-bit, the next GEMM's operand,
// rounded as narrow_f32 rounds (SwiGLU's output for the down projection).
void elementwise(Elementwise op, const float* a, const float* b, void* y, WeightType y_type, int64_t n,
                 cudaStream_t stream);

}  // namespace qvl::cuda
