#pragma once
// What every attention kernel's host entry point takes (attention.cuh, flash_attention.cuh, flash_attention_mma.cuh,
// attention_unfused.cuh): out [S, Hq, D] = softmax(q·kᵀ·scale + mask)·v for q [S, Hq, D] and k, v [T, Hkv, D], the
// first kv_len rows of k and v used; query head h reads kv head h / (Hq / Hkv). Plain C++: the CUDA backend fills
// it from its AttentionMask (backend.h).
#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

struct AttentionArgs {
  const float* q = nullptr;
  // f32 or bf16 (a KV cache: kv_cache.cuh), or f16 (the vision tower's keys and values as its bias + RoPE kernel
  // writes them for the tensor-core kernel, which copies them into its tiles as they are: flash_attention_mma only;
  // every other kernel refuses them).
  const void* k = nullptr;
  const void* v = nullptr;
  WeightType kv_type = WeightType::F32;
  float* out = nullptr;
  // Instead of `out` (flash_attention_mma only): the result in the 16-bit type of the product that reads it (bf16 or
  // f16, rounded as narrow_f32 rounds), so that the product runs no conversion pass of its own.
  void* operand = nullptr;
  WeightType operand_type = WeightType::F32;
  int64_t s = 0, hq = 0, hkv = 0, d = 0, kv_len = 0;
  float scale = 1.0f;
  // The mask: causal with `past` earlier positions, or block-diagonal segments (`bounds` on the device, S + 1
  // ascending entries from 0 to S). Causal may be block-sparse: `layout` (on the device, layout_side² entries, 0/1)
  // says which 64-key block each 64-position query block sees (nullptr: dense).
  bool causal = true;
  int64_t past = 0;
  const int64_t* bounds = nullptr;
  int64_t segments = 0;
  const int64_t* layout = nullptr;
  int64_t layout_side = 0;
};

}  // namespace qvl::cuda
