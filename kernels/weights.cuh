#pragma once
// Weights stay in their stored type on the device (f32, f16 or bf16) and are widened to f32 in registers, so every
// kernel runs on every architecture: bf16 -> f32 is a 16-bit shift, f16 -> f32 a conversion Pascal has in hardware.
#include <cuda_fp16.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

__device__ __forceinline__ float load_weight(const void* w, WeightType t, int64_t i) {
  switch (t) {
    case WeightType::F16: return __half2float(static_cast<const __half*>(w)[i]);
    case WeightType::BF16: return __uint_as_float(uint32_t(static_cast<const uint16_t*>(w)[i]) << 16);
    default: return static_cast<const float*>(w)[i];
  }
}

// bf16 by integer rounding, to nearest even (Pascal has no bf16 conversion instructions); NaN stays NaN.
__device__ __forceinline__ uint16_t round_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// y[i] = v in y's type: f32, or narrowed to the 16-bit type a GEMM reads (a norm that writes its GEMM's operand
// saves each product its own conversion pass; the rounding is the conversion's, so the bits are the same).
__device__ __forceinline__ void store_activation(void* y, WeightType t, int64_t i, float v) {
  switch (t) {
    case WeightType::F16: static_cast<__half*>(y)[i] = __float2half_rn(v); break;
    case WeightType::BF16: static_cast<uint16_t*>(y)[i] = round_to_bf16(v); break;
    default: static_cast<float*>(y)[i] = v;
  }
}

// Row `offset` elements into an activation tensor of type t.
__device__ __forceinline__ void* activation_row(void* y, WeightType t, int64_t offset) {
  return static_cast<char*>(y) + offset * (t == WeightType::F32 ? 4 : 2);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// LayerNorm's output and variance terms, each step rounded as written (no FMA contraction left to the compiler), so
// the fused add + LayerNorm and the plain LayerNorm give identical bits: a 1-ulp difference in a normed row flips
// the bf16 rounding of some GEMM inputs downstream and showed up as a 3.6e-3 relative change in a tiny model's logits.
__device__ __forceinline__ float layer_norm_value(float x, float mean, float inv, float w, float b) {
  return __fadd_rn(__fmul_rn(__fmul_rn(inv, __fsub_rn(x, mean)), w), b);
}
__device__ __forceinline__ float add_squared_deviation(float acc, float x, float mean) {
  const float d = __fsub_rn(x, mean);
  return __fmaf_rn(d, d, acc);
}

// One rotate_half pair of RoPE, x' = x·cos + rotate_half(x)·sin, each step rounded as written: the plain RoPE kernel
// and the fused q/k norm + RoPE give the same bits (contracted differently, they differed by an ulp, which the
// bf16 rounding of the next GEMM's inputs turns into visible logit differences).
__device__ __forceinline__ void rope_rotate(float a, float b, float cos_lo, float sin_lo, float cos_hi, float sin_hi,
                                            float& out_lo, float& out_hi) {
  out_lo = __fsub_rn(__fmul_rn(a, cos_lo), __fmul_rn(b, sin_lo));
  out_hi = __fadd_rn(__fmul_rn(b, cos_hi), __fmul_rn(a, sin_hi));
}

// Sum over a block of kThreads threads (a multiple of 32); every thread gets the total. Safe to call repeatedly.
template <int kThreads> __device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0;
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  __syncthreads();  // partial is reused by the next call
  return total;
}

}  // namespace qvl::cuda
