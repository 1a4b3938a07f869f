#pragma once
// The decode GEMV with q8 or q4 weights: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias) for M <= 4, in one launch. Each
// block quantises x per block of 32 into shared memory (the arithmetic of the CPU's quantize_activation_row, so both
// backends multiply the same integers), optionally after the input RMSNorm (folded in, the plain RMSNorm kernel's
// bits), then dots every weight block with dp4a (sm_61 and newer: four int8 products a lane a cycle, where Pascal's
// f16 arithmetic runs at 1/64 rate), scaling by the weight's f16 and the activation's f32 scale per block in f32.
// Like the float GEMV: up to three matrices of the same K in one launch (q, k, v), gate/up with SwiGLU, and the
// residual add in the epilogue.
#include <cuda_runtime.h>

#include <cstddef>

#include "gemv.cuh"
#include "quantized_args.h"

namespace qvl::cuda {

enum class QuantEpilogue : int { Store, Accumulate, SwiGlu };  // y = x·wᵀ + b; y += x·wᵀ + b; silu(x·gateᵀ) ⊙ x·upᵀ

struct QuantGemvPart {
  QuantMatrix w;
  const void* bias = nullptr;
  float* y = nullptr;  // [M, w.rows]
};

struct QuantGemvArgs {
  const float* x = nullptr;  // [m, k] f32
  int64_t m = 0, k = 0;
  GemvNorm norm;  // w == nullptr: none
  QuantGemvPart part[3];
  int count = 0;  // SwiGlu: 2 (gate, up; into part 0's y)
  QuantEpilogue epilogue = QuantEpilogue::Store;
  WeightType bias_type = WeightType::F32;
  int64_t max_blocks = 1 << 30;  // the blocks the GPU holds at once (multiprocessors x 8): rows beyond go grid-stride
};

// Whether one launch takes m rows of k values (its shared memory: the quantised rows, and the normed f32 rows when
// normed, within the 48 KB every GPU gives without an opt-in).
bool gemv_quantized_fits(int64_t m, int64_t k, bool normed);
// Call after gemv_quantized_fits. overlap: programmatic dependent launch (common.cuh).
void gemv_quantized(const QuantGemvArgs& a, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
