#pragma once
// The decode GEMV kernel, shared by the plain projection (gemv.cu) and the fused SwiGLU projection (gemv_swiglu.cu):
// M <= 4 activation rows, memory-bound (N·K·sizeof(w) bytes for 2·M·N·K FLOPs), so it aims at the DRAM roofline: one
// warp per output row, 16-byte loads (8 bf16/f16 or 4 f32 per lane per step), the loop unrolled so several loads are
// in flight, f32 accumulation, shuffle reduction. Gated, a warp streams the same row of two matrices (gate and up):
// twice the bytes in flight per warp, and silu(gate) ⊙ up is applied before anything leaves registers. Plain, the
// rows may come from up to three matrices of the same K and type, each with its own output (q, k and v in one
// launch: a small matrix alone does not fill the GPU long enough to amortise the launch and the ramp-up).
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "weights.cuh"

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

constexpr int kGemvWarps = 4;

// One matrix of a launch: n rows of w (and bias, optional) into y [M, n].
struct GemvPart {
  const void* w = nullptr;
  const void* bias = nullptr;
  float* y = nullptr;
  int64_t n = 0;
};
struct GemvParts {
  static constexpr int kMax = 3;
  GemvPart part[kMax];
  int count = 0;
  int64_t rows() const {
    int64_t n = 0;
    for (int p = 0; p < count; ++p) n += part[p].n;
    return n;
  }
};

// Plain: each part's y = x · wᵀ (+ bias), the parts' rows one after another. Gated (one part): y = silu(x · wᵀ) ⊙
// (x · upᵀ).
template <typename W, int M, bool kGated>
__global__ void gemv_kernel(const float* __restrict__ x, GemvParts parts, const W* __restrict__ up,
                            WeightType bias_type, int64_t k) {
  int64_t row = int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  // The part this row belongs to (unrolled: a dynamic index into the parameter struct would copy it to local memory).
  GemvPart part = parts.part[0];
  for (int p = 1; p < GemvParts::kMax; ++p)
    if (p < parts.count && row >= part.n) row -= part.n, part = parts.part[p];
  const int64_t n = part.n;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  float* __restrict__ y = part.y;
  const void* bias = part.bias;
  constexpr int kVec = Vec16<W>::kCount;
  constexpr int kUnroll = kGated ? 2 : 4;  // about the same bytes in flight either way
  const W* r0 = static_cast<const W*>(part.w) + row * k;
  const W* r1 = kGated ? up + row * k : nullptr;
  float acc0[M] = {}, acc1[M] = {};
#pragma unroll kUnroll
  for (int64_t i = int64_t(lane) * kVec; i < k; i += 32 * kVec) {
    float a[kVec], b[kVec];
    Vec16<W>::load(r0 + i, a);
    if constexpr (kGated) Vec16<W>::load(r1 + i, b);
    for (int m = 0; m < M; ++m) {
      const float* xm = x + m * k + i;
      for (int j = 0; j < kVec; ++j) {
        acc0[m] += xm[j] * a[j];
        if constexpr (kGated) acc1[m] += xm[j] * b[j];
      }
    }
  }
  const float b0 = !kGated && bias ? load_weight(bias, bias_type, row) : 0.0f;
  for (int m = 0; m < M; ++m) {
    const float s = warp_sum(acc0[m]);
    if constexpr (kGated) {
      const float up_sum = warp_sum(acc1[m]);
      if (lane == 0) y[m * n + row] = s / (1.0f + expf(-s)) * up_sum;
    } else {
      if (lane == 0) y[m * n + row] = s + b0;
    }
  }
}

// Whether the kernel can take this shape: M <= 4, K a multiple of the 16-byte vector, 16-byte aligned rows.
inline bool gemv_fits(WeightType w_type, int64_t m, int64_t k, const void* x, const void* w0, const void* w1) {
  const int64_t vec = w_type == WeightType::F32 ? 4 : 8;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return m <= 4 && k % vec == 0 && aligned(x) && aligned(w0) && (!w1 || aligned(w1));
}

template <typename W, bool kGated>
void launch_gemv_typed(const float* x, const GemvParts& parts, const void* up, WeightType bias_type, int64_t m,
                       int64_t k, cudaStream_t stream) {
  const auto* b = static_cast<const W*>(up);
  const dim3 grid(unsigned((parts.rows() + kGemvWarps - 1) / kGemvWarps)), block(kGemvWarps * 32);
  switch (m) {
    case 1: gemv_kernel<W, 1, kGated><<<grid, block, 0, stream>>>(x, parts, b, bias_type, k); break;
    case 2: gemv_kernel<W, 2, kGated><<<grid, block, 0, stream>>>(x, parts, b, bias_type, k); break;
    case 3: gemv_kernel<W, 3, kGated><<<grid, block, 0, stream>>>(x, parts, b, bias_type, k); break;
    default: gemv_kernel<W, 4, kGated><<<grid, block, 0, stream>>>(x, parts, b, bias_type, k); break;
  }
  CUDA_CHECK_LAUNCH();
}

// Call after gemv_fits. up (gated only, one part): the up matrix, same type and shape as the part's.
template <bool kGated>
void launch_gemv(WeightType w_type, const float* x, const GemvParts& parts, const void* up, WeightType bias_type,
                 int64_t m, int64_t k, cudaStream_t stream) {
  if (m == 0 || parts.rows() == 0) return;
  if (w_type == WeightType::BF16) launch_gemv_typed<uint16_t, kGated>(x, parts, up, bias_type, m, k, stream);
  else if (w_type == WeightType::F16) launch_gemv_typed<__half, kGated>(x, parts, up, bias_type, m, k, stream);
  else launch_gemv_typed<float, kGated>(x, parts, up, bias_type, m, k, stream);
}

}  // namespace qvl::cuda
