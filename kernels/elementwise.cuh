#pragma once
// Element-wise ops on f32: residual add, SiLU(gate)·up, GELU (tanh approximation and exact erf).
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

enum class Elementwise : int { Add, SiluMul, GeluTanh, GeluErf };

// y = op(a, b); b is ignored by the GELUs. y may alias a.
void elementwise(Elementwise op, const float* a, const float* b, float* y, int64_t n, cudaStream_t stream);

}  // namespace qvl::cuda
