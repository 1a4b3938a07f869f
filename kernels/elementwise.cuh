#pragma once
// Element-wise ops on f32: residual add, SiLU(gate)·up, GELU (tanh approximation and exact erf).
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

enum class Elementwise : int { Add, SiluMul, GeluTanh, GeluErf };

// y[r, c] = op(a[r, c], b[r, c]) over rows x cols; b is ignored by the GELUs (may be null). a and b are f32 rows
// `in_stride` floats apart (cols where they are whole tensors; 2·cols for a SwiGLU whose gate and up came from one
// product: a = the packed rows, b = a + cols). y is dense: f32 (it may alias a where in_stride == cols) or, y_type
// 16-bit, the next GEMM's operand, rounded as narrow_f32 rounds (SwiGLU's output for the down projection).
struct ElementwiseArgs {
  Elementwise op;
  const float* a;
  const float* b;
  void* y;
  WeightType y_type;
  int64_t rows, cols, in_stride;
};
void elementwise(const ElementwiseArgs& args, cudaStream_t stream);

}  // namespace qvl::cuda
