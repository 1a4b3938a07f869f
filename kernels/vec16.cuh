#pragma once
// 16 bytes of weights per load (8 bf16/f16 or 4 f32), widened to f32 in registers: the GEMV kernels' unit of work.
#include <cuda_fp16.h>

#include <cstdint>

namespace qvl::cuda {

template <typename W> struct Vec16;  // 16 bytes of weights, widened to f32
template <> struct Vec16<float> {
  static constexpr int kCount = 4;
  __device__ static void load(const float* p, float* out) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  }
};
template <> struct Vec16<uint16_t> {  // bf16
  static constexpr int kCount = 8;
  __device__ static void load(const uint16_t* p, float* out) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
};
template <> struct Vec16<__half> {
  static constexpr int kCount = 8;
  __device__ static void load(const __half* p, float* out) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x, out[2 * i + 1] = f.y;
    }
  }
};

}  // namespace qvl::cuda
