#pragma once
// The vision tower's q, k, v after their batched GEMM: each output's bias added, and q and k (outputs 0 and 1)
// rotated by RoPE, in one launch (add_biases and two rope launches before, each a pass over its rows).
#include <cuda_runtime.h>

#include <cstdint>

#include "convert.cuh"  // Biases
#include "weight_type.h"

namespace qvl::cuda {

// RoPE tables [rows, head_dim] for outputs [rows, heads, head_dim] (rope.cuh's rotate_half pairs d, d + head_dim/2).
struct RopeTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t rows = 0, heads = 0, head_dim = 0;
};

// biases.y[i] [rows, heads·head_dim] += biases.bias[i] (none where nullptr), then y[0] and y[1] rotated: the same
// arithmetic as add_biases followed by rope on each, so the same bits.
void add_biases_rope(const Biases& biases, WeightType bias_type, const RopeTables& rope, cudaStream_t stream);

}  // namespace qvl::cuda
