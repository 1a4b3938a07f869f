#pragma once
// Row normalisations over the last dimension: RMSNorm (y = w ⊙ x / rms(x)) and LayerNorm (y = w ⊙ (x − μ)/σ + b).
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

// What the four row norms take (this header's two, add_rms_norm.cuh, add_layer_norm.cuh).
struct RowNormArgs {
  float* x = nullptr;                // [rows, width]; read, and for the add + norm kernels written with the sum
  const float* residual = nullptr;   // add + norm: x += residual
  const void* residual_bias = nullptr;  // add + LayerNorm: the bias of the GEMM that made the residual (optional)
  WeightType residual_bias_type = WeightType::F32;
  const void* w = nullptr;
  WeightType w_type = WeightType::F32;
  const void* b = nullptr;  // LayerNorm only
  WeightType b_type = WeightType::F32;
  float eps = 0;
  void* y = nullptr;  // f32, or a 16-bit GEMM operand
  WeightType y_type = WeightType::F32;
  int64_t rows = 0, width = 0;
};

void rms_norm(const RowNormArgs& a, cudaStream_t stream);
void layer_norm(const RowNormArgs& a, cudaStream_t stream);

}  // namespace qvl::cuda
