#pragma once
// Weights stay in their stored type on the device (f32, f16 or bf16) and are widened to f32 in registers, so every
// kernel runs on every architecture: bf16 -> f32 is a 16-bit shift, f16 -> f32 a conversion Pascal has in hardware.
// This header is the one place a weight is loaded and widened: one value (widen, load_weight for a type known at run
// time) or a 16-byte vector (Vec16, the GEMVs). A new storage format adds its widening here.
#include <cuda_fp16.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(uint16_t bf16) { return __uint_as_float(uint32_t(bf16) << 16); }

__device__ __forceinline__ float load_weight(const void* w, WeightType t, int64_t i) {
  switch (t) {
    case WeightType::F16: return widen(static_cast<const __half*>(w)[i]);
    case WeightType::BF16: return widen(static_cast<const uint16_t*>(w)[i]);
    default: return static_cast<const float*>(w)[i];
  }
}

// Bytes an element of type t takes.
__host__ __device__ constexpr int weight_type_bytes(WeightType t) { return t == WeightType::F32 ? 4 : 2; }

// Asks L2 for weights [0, n) of type t, a 128-byte line a lane of the calling warp, holding no registers: for a
// kernel that uses them only after its wait (and a barrier or two) but may ask for them before it.
__device__ __forceinline__ void prefetch_weights_l2(const void* w, WeightType t, int64_t n, int lane) {
  // From the 128-byte line holding the first weight: a start inside a line would leave the last line unasked.
  const uintptr_t end = reinterpret_cast<uintptr_t>(w) + uintptr_t(n * weight_type_bytes(t));
  for (uintptr_t at = (reinterpret_cast<uintptr_t>(w) & ~uintptr_t(127)) + uintptr_t(lane) * 128; at < end; at += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
}

template <typename W> struct Vec16;  // 16 bytes of weights: loaded raw, widened to f32 when used
template <> struct Vec16<float> {
  static constexpr int kCount = 4;
  __device__ static void widen(const uint4& v, float* out) {
    out[0] = __uint_as_float(v.x), out[1] = __uint_as_float(v.y), out[2] = __uint_as_float(v.z),
    out[3] = __uint_as_float(v.w);
  }
};
template <> struct Vec16<uint16_t> {  // bf16
  static constexpr int kCount = 8;
  __device__ static void widen(const uint4& v, float* out) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
};
template <> struct Vec16<__half> {
  static constexpr int kCount = 8;
  __device__ static void widen(const uint4& v, float* out) {
    const __half2* h = reinterpret_cast<const __half2*>(&v);
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x, out[2 * i + 1] = f.y;
    }
  }
};


// bf16 by integer rounding, to nearest even (Pascal has no bf16 conversion instructions); NaN stays NaN.
__device__ __forceinline__ uint16_t round_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The element types of a weight and of an activation as C++ types, for kernels templated on them (float, __half, or
// uint16_t for bf16). With a run-time type switch at every load and store of their unrolled loops the row kernels
// were 2,000-3,300 SASS instructions (sm_80) and ran at 1 TB/s or less: the vision's add + LayerNorm took 12.4 µs
// for 11 MB, its LayerNorm 8 µs for 6.4 MB, the decoder's add + RMSNorm 6.9 µs (H100 timeline). Templated, with
// vector loads of the weights, the same two LayerNorms take 4.7 and 3.1 µs; which of the two changes bought how
// much was not measured apart (the likely cost of the switches: the instructions issued for them, once per block).
template <typename F> void with_element_type(WeightType t, F&& f) {
  switch (t) {
    case WeightType::F16: f(__half{}); break;
    case WeightType::BF16: f(uint16_t{}); break;
    default: f(float{});
  }
}
__device__ __forceinline__ void store_as(float* y, int64_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store_as(__half* y, int64_t i, float v) { y[i] = __float2half_rn(v); }
__device__ __forceinline__ void store_as(uint16_t* y, int64_t i, float v) { y[i] = round_to_bf16(v); }
// y[i] = v in y's type: f32, or narrowed to the 16-bit type a GEMM reads (a norm that writes its GEMM's operand
// saves each product its own conversion pass; the rounding is the conversion's, so the bits are the same).
__device__ __forceinline__ void store_activation(void* y, WeightType t, int64_t i, float v) {
  switch (t) {
    case WeightType::F16: return store_as(static_cast<__half*>(y), i, v);
    case WeightType::BF16: return store_as(static_cast<uint16_t*>(y), i, v);
    default: return store_as(static_cast<float*>(y), i, v);
  }
}
// Four consecutive elements, i a multiple of 4 and the vector 8- (16-bit) or 16-byte (f32) aligned.
__device__ __forceinline__ float4 load4(const float* p, int64_t i) { return *reinterpret_cast<const float4*>(p + i); }
__device__ __forceinline__ float4 load4(const uint16_t* p, int64_t i) {
  const uint2 r = *reinterpret_cast<const uint2*>(p + i);
  return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xffff0000u), __uint_as_float(r.y << 16),
                     __uint_as_float(r.y & 0xffff0000u));
}
__device__ __forceinline__ float4 load4(const __half* p, int64_t i) {
  const uint2 r = *reinterpret_cast<const uint2*>(p + i);
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&r.x)),
               hi = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ void store4(float* y, int64_t i, float4 v) { *reinterpret_cast<float4*>(y + i) = v; }
__device__ __forceinline__ void store4(uint16_t* y, int64_t i, float4 v) {
  *reinterpret_cast<uint2*>(y + i) = make_uint2(uint32_t(round_to_bf16(v.x)) | uint32_t(round_to_bf16(v.y)) << 16,
                                                uint32_t(round_to_bf16(v.z)) | uint32_t(round_to_bf16(v.w)) << 16);
}
__device__ __forceinline__ void store4(__half* y, int64_t i, float4 v) {
  const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
  *reinterpret_cast<uint2*>(y + i) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}
// store4 into an activation of type t (store_activation's four-wide form).
__device__ __forceinline__ void store4_activation(void* y, WeightType t, int64_t i, float4 v) {
  switch (t) {
    case WeightType::F16: return store4(static_cast<__half*>(y), i, v);
    case WeightType::BF16: return store4(static_cast<uint16_t*>(y), i, v);
    default: return store4(static_cast<float*>(y), i, v);
  }
}

// Row `offset` elements into an activation tensor of type t.
__device__ __forceinline__ void* activation_row(void* y, WeightType t, int64_t offset) {
  return static_cast<char*>(y) + offset * weight_type_bytes(t);
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
