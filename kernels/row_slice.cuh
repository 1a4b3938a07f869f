#pragma once
// One thread's strided share of a row (elements threadIdx.x + n·kThreads, n < kPerThread), loaded into registers
// with every load issued before the first is used. Row kernels at decode run one block on one row: a rolled loop of
// dependent-looking loads waits a full memory latency per iteration (measured: 10 µs for a 2048-wide RMSNorm);
// issuing all loads at once waits about one.
#include <cstdint>

#include "weights.cuh"

namespace qvl::cuda {

template <int kThreads, int kPerThread> struct RowSlice {
  float v[kPerThread];

  __device__ __forceinline__ void load(const float* row, int64_t width) {
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      v[n] = i < width ? row[i] : 0.0f;
    }
  }
  // The fused residual add: the slice of row + (res + bias), written back to row (0 past the row's end). The bias
  // (optional) is the residual's own, as a GEMM without its bias leaves it: res + bias is rounded first, as the
  // unfused bias kernel stores it.
  __device__ __forceinline__ void load_sum(float* row, const float* res, int64_t width, const void* bias = nullptr,
                                           WeightType bias_type = WeightType::F32) {
    RowSlice add;
    load(row, width);
    add.load(res, width);
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      if (bias && i < width) add.v[n] += load_weight(bias, bias_type, i);
      v[n] += add.v[n];
      if (i < width) row[i] = v[n];
    }
  }
  __device__ __forceinline__ float sum() const {
    float s = 0;
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) s += v[n];
    return s;
  }
  __device__ __forceinline__ float sum_of_squares() const {
    float s = 0;
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) s += v[n] * v[n];
    return s;
  }
  // out[i] = w[i] · x[i] · scale over the whole row: x from the slice, and from `row` (in memory) past it.
  __device__ __forceinline__ void write_scaled(float* out, const float* row, const void* w, WeightType wt, float scale,
                                               int64_t width) const {
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      if (i < width) out[i] = load_weight(w, wt, i) * (v[n] * scale);
    }
    for (int64_t i = threadIdx.x + kCapacity; i < width; i += kThreads) out[i] = load_weight(w, wt, i) * (row[i] * scale);
  }
  static constexpr int64_t kCapacity = int64_t(kThreads) * kPerThread;
};

}  // namespace qvl::cuda
