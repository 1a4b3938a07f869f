#pragma once
// The KV cache's element type, for the kernels that write or read it (qk_norm_rope_append, the attention kernels,
// the attention tap): f32, or bf16 (stored as uint16_t, as bf16 weights are) — half the bytes, which is what decode
// attention at long contexts and a 2 GiB card's context room are made of (the 2B model's cache is 229 KB a token in
// f32). bf16 is what transformers itself keeps in a bf16 model's cache. Vision attention reads f32 activations
// through the same kernels, so each is instantiated for both (the tensor-core kernel also reads the tower's keys and
// values in f16: Backend::alloc_keys_values).
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "weights.cuh"

namespace qvl::cuda {

// Four consecutive elements widened to f32: 16 bytes of f32 or 8 of bf16, aligned to that.
__device__ __forceinline__ float4 load_kv4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load_kv4(const uint16_t* p) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16),
                     __uint_as_float(w.y & 0xffff0000u));
}
__device__ __forceinline__ float load_kv(const float* p) { return *p; }
__device__ __forceinline__ float load_kv(const uint16_t* p) { return widen(*p); }
__device__ __forceinline__ void store_kv(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_kv(uint16_t* p, float v) { *p = round_to_bf16(v); }

// Calls f(element) with a value of the cache's element type (float or uint16_t for bf16): the launch sites pick the
// kernel instance with `using KV = decltype(element)`.
template <typename F>
void with_kv_type(bool bf16, F&& f) {
  if (bf16) f(uint16_t{});
  else f(float{});
}
// The same for an attention's keys and values (AttentionArgs::kv_type): f16 ones are the tensor-core kernel's alone.
template <typename F>
void with_kv_type(WeightType type, F&& f) {
  if (type == WeightType::F16) throw std::runtime_error("attention: f16 keys and values are for the tensor-core kernel");
  with_kv_type(type == WeightType::BF16, std::forward<F>(f));
}

}  // namespace qvl::cuda
