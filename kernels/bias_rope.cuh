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

// Where the three results go: out[i], of type type[i]. An f32 result is written in place (out[i] = biases.y[i]); a
// 16-bit one into a tensor of its own (the vision tower's k and v in f16 for the tensor-core attention, which copies
// them into its tiles as they are: CudaBackend::alloc_keys_values), rounded to nearest as that kernel's widening of
// f32 tiles rounds, so the attention reads the same values.
struct BiasRopeOutputs {
  void* out[3] = {};
  WeightType type[3] = {WeightType::F32, WeightType::F32, WeightType::F32};
};

// biases.y[i] [rows, heads·head_dim] + biases.bias[i] (none where nullptr), y[0] and y[1] then rotated, into out[i]:
// the same arithmetic as add_biases followed by rope on each, so the same bits.
void add_biases_rope(const Biases& biases, WeightType bias_type, const RopeTables& rope, const BiasRopeOutputs& outputs,
                     cudaStream_t stream);

}  // namespace qvl::cuda
