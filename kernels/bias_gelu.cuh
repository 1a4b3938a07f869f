#pragma once
// The bias and GELU after a cuBLAS GEMM in one pass: y = gelu(y + bias) over [rows, cols], into y or into the next
// GEMM's operand. Unfused, the bias kernel
// writes y and the GELU reads it back: two launches and four passes over y instead of one and two (the vision MLP's
// [patches, 4096] activations, 24 times an image).
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

// out = gelu(y + bias): out is y (out_type F32), or the next GEMM's 16-bit operand, rounded as narrow_f32 rounds.
struct BiasGeluArgs {
  const float* y = nullptr;  // [rows, cols], the GEMM's result without its bias
  const void* bias = nullptr;
  WeightType bias_type = WeightType::F32;
  void* out = nullptr;
  WeightType out_type = WeightType::F32;
  int64_t rows = 0, cols = 0;
  bool tanh_form = true;
};
void bias_gelu(const BiasGeluArgs& a, cudaStream_t stream);

}  // namespace qvl::cuda
