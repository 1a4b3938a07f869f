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
  // The fused residual add over the whole row: row += res + bias, written back to row; the slice keeps its share of
  // the sums (0 past the row's end), and this thread's elements past the slice are summed in memory, where it reads
  // them back itself (no barrier). The bias (optional) is the residual's own, as a GEMM without its bias leaves it:
  // res + bias is rounded first, as the unfused bias kernel stores it.
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
    for (int64_t i = threadIdx.x + kCapacity; i < width; i += kThreads)
      row[i] += bias ? res[i] + load_weight(bias, bias_type, i) : res[i];
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
  // out[i] = w[i] · x[i] · scale over the whole row, stored as out_type (store_activation): x from the slice, and
  // from `row` (in memory) past it.
  __device__ __forceinline__ void write_scaled(void* out, WeightType out_type, const float* row, const void* w,
                                               WeightType wt, float scale, int64_t width) const {
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      if (i < width) store_activation(out, out_type, i, rms_scaled(load_weight(w, wt, i), v[n], scale));
    }
    for (int64_t i = threadIdx.x + kCapacity; i < width; i += kThreads)
      store_activation(out, out_type, i, rms_scaled(load_weight(w, wt, i), row[i], scale));
  }
  // One normalised value, w · (x · scale): the rounding every RMSNorm of the project uses.
  __device__ static __forceinline__ float rms_scaled(float w, float x, float scale) { return w * (x * scale); }
  static constexpr int64_t kCapacity = int64_t(kThreads) * kPerThread;
};

// RMSNorm of one row by a whole block of kThreads threads: out = w ⊙ (in / rms(in)); out may alias in. The plain
// RMSNorm kernel and the GEMV that folds the norm into its projection both run this, so they give the same bits
// (the reduction order is the block's). In two steps, so that a caller can issue other loads between them: load
// (this thread's share of the row, into registers) and finish (the block sum, then out).
template <int kThreads, int kPerThread> struct RmsNormRow {
  using Slice = RowSlice<kThreads, kPerThread>;
  Slice x;
  const float* in = nullptr;
  int64_t width = 0;

  __device__ __forceinline__ void load(const float* row, int64_t n) {
    in = row, width = n;
    x.load(row, n);
  }
  __device__ __forceinline__ void finish(const void* w, WeightType wt, float eps, void* out, WeightType out_type) const {
    x.write_scaled(out, out_type, in, w, wt, inverse(eps), width);
  }
  // 1 / rms(in) (a block sum: every thread calls it), for a caller that scales the values itself (Slice::rms_scaled).
  __device__ __forceinline__ float inverse(float eps) const {
    float sq = x.sum_of_squares();
    for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) sq += in[i] * in[i];
    return rsqrtf(block_sum<kThreads>(sq) / float(width) + eps);
  }
};

}  // namespace qvl::cuda
