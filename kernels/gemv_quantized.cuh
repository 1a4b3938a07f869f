#pragma once
// The decode GEMV with q8 or q4 weights: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias) for M <= 4, reading x quantised per
// block of 32 (quantize_rows, which folds the input RMSNorm), dotting every weight block with dp4a (sm_61 and newer:
// four int8 products a lane a cycle, where Pascal's f16 arithmetic runs at 1/64 rate), scaling by the weight's f16
// and the activation's f32 scale per block in f32. Like the float GEMV: up to three matrices of the same K in one
// launch (q, k, v), gate/up with SwiGLU, and the residual add in the epilogue.
#include <cuda_runtime.h>

#include "quantized_args.h"

namespace qvl::cuda {

enum class QuantEpilogue : int { Store, Accumulate, SwiGlu };  // y = x·wᵀ + b; y += x·wᵀ + b; silu(x·gateᵀ) ⊙ x·upᵀ

struct QuantGemvPart {
  QuantMatrix w;
  const void* bias = nullptr;
  float* y = nullptr;  // [M, w.rows]
};

struct QuantGemvArgs {
  QuantizedRows x;  // M = x.rows, K = x.blocks · 32 (past the matrices' width: zeros)
  QuantGemvPart part[3];
  int count = 0;  // SwiGlu: 2 (gate, up; into part 0's y)
  QuantEpilogue epilogue = QuantEpilogue::Store;
  WeightType bias_type = WeightType::F32;
};

// overlap: programmatic dependent launch (common.cuh): the first weights are asked for while quantize_rows runs.
void gemv_quantized(const QuantGemvArgs& a, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
