#pragma once
// One thread's strided share of a row (elements threadIdx.x + n·kThreads, n < kPerThread), loaded into registers
// with every load issued before the first is used. Row kernels at decode run one block on one row: a rolled loop of
// dependent-looking loads waits a full memory latency per iteration (measured: 10 µs for a 2048-wide RMSNorm);
// issuing all loads at once waits about one.
#include <cstdint>
#include <type_traits>

#include "weights.cuh"

namespace qvl::cuda {

// How a row kernel reads a weight vector and writes its output: with the element type known at run time (a switch
// at every access: the decode GEMVs that fold a norm in) or as a template argument (the row kernels: weights.cuh,
// with_element_type, says why).
struct RuntimeWeights {
  const void* p;
  WeightType type;
  __device__ __forceinline__ float operator[](int64_t i) const { return load_weight(p, type, i); }
};
template <typename W> struct TypedWeights {
  const W* p;
  __device__ __forceinline__ float operator[](int64_t i) const { return widen(p[i]); }
};
// Four consecutive weights (i a multiple of 4): one vector load where the type is known, else four loads.
template <typename W> __device__ __forceinline__ float4 load4(const TypedWeights<W>& w, int64_t i) { return load4(w.p, i); }
__device__ __forceinline__ float4 load4(const RuntimeWeights& w, int64_t i) {
  return make_float4(w[i], w[i + 1], w[i + 2], w[i + 3]);
}
struct NoBias {  // a residual add without a bias
  __device__ __forceinline__ float operator[](int64_t) const { return 0.0f; }
};
struct RuntimeOutput {
  void* p;
  WeightType type;
  __device__ __forceinline__ void store(int64_t i, float v) const { store_activation(p, type, i, v); }
  __device__ __forceinline__ RuntimeOutput row(int64_t offset) const { return {activation_row(p, type, offset), type}; }
};
template <typename Y> struct TypedOutput {
  Y* p;
  __device__ __forceinline__ void store(int64_t i, float v) const { store_as(p, i, v); }
  __device__ __forceinline__ TypedOutput row(int64_t offset) const { return {p + offset}; }
};

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
  // them back itself (no barrier). The bias (or NoBias) is the residual's own, as a GEMM without its bias leaves it:
  // res + bias is rounded first, as the unfused bias kernel stores it.
  template <typename Bias>
  __device__ __forceinline__ void load_sum(float* row, const float* res, int64_t width, const Bias& bias) {
    constexpr bool kBias = !std::is_same_v<Bias, NoBias>;
    RowSlice add;
    load(row, width);
    add.load(res, width);
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {  // every load before the first store (load_weights says why)
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      if (kBias && i < width) add.v[n] += bias[i];
      v[n] += add.v[n];
    }
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      if (i < width) row[i] = v[n];
    }
    for (int64_t i = threadIdx.x + kCapacity; i < width; i += kThreads) row[i] += kBias ? res[i] + bias[i] : res[i];
  }
  // This thread's share of a weight vector, widened to f32 (0 past the slice's end), loaded before a kernel's first
  // store (so that no weight load has to wait behind a store that might alias it: the mergers' block LayerNorm went
  // 10.0 -> 5.2 µs with this alone).
  template <typename Weights> __device__ __forceinline__ void load_weights(const Weights& w, int64_t width) {
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      v[n] = i < width ? w[i] : 0.0f;
    }
  }
  __device__ __forceinline__ float sum() const {
    float s = 0;
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) s += v[n];
    return s;
  }
  // Σ v², each step one fused multiply-add (written out, so that every kernel that sums a row contracts alike).
  __device__ __forceinline__ float sum_of_squares() const {
    float s = 0;
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) s = __fmaf_rn(v[n], v[n], s);
    return s;
  }
  // out[i] = w[i] · x[i] · scale over the whole row: x from the slice, and from `row` (in memory) past it.
  template <typename Weights, typename Out>
  __device__ __forceinline__ void write_scaled(const Out& out, const float* row, const Weights& w, float scale,
                                               int64_t width) const {
    RowSlice weights;
    weights.load_weights(w, width);
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      if (i < width) out.store(i, rms_scaled(weights.v[n], v[n], scale));
    }
    for (int64_t i = threadIdx.x + kCapacity; i < width; i += kThreads) out.store(i, rms_scaled(w[i], row[i], scale));
  }
  // One normalised value, w · (x · scale): the rounding every RMSNorm of the project uses.
  __device__ static __forceinline__ float rms_scaled(float w, float x, float scale) { return w * (x * scale); }
  static constexpr int64_t kCapacity = int64_t(kThreads) * kPerThread;
};

// LayerNorm of one row by a whole block of kThreads threads, its sums in the slice x (the row past the slice in
// `row`, in memory): out = w ⊙ (x − mean) / sqrt(var + eps) + b. The plain and the fused add + LayerNorm kernels of
// rows too wide for a warp (layer_norm_rows.cuh) both run it, so they give the same bits.
template <int kThreads, int kPerThread, typename Weights, typename Out>
__device__ __forceinline__ void block_layer_norm(const RowSlice<kThreads, kPerThread>& x, const float* row,
                                                 int64_t width, const Weights& w, const Weights& b, float eps,
                                                 const Out& out) {
  using Slice = RowSlice<kThreads, kPerThread>;
  Slice ws, bs;
  ws.load_weights(w, width);
  bs.load_weights(b, width);
  float total = x.sum();
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) total += row[i];
  const float mean = block_sum<kThreads>(total) / float(width);
  float var = 0;
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int64_t i = threadIdx.x + int64_t(n) * kThreads;
    if (i < width) var = add_squared_deviation(var, x.v[n], mean);
  }
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) var = add_squared_deviation(var, row[i], mean);
  const float inv = rsqrtf(block_sum<kThreads>(var) / float(width) + eps);
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int64_t i = threadIdx.x + int64_t(n) * kThreads;
    if (i < width) out.store(i, layer_norm_value(x.v[n], mean, inv, ws.v[n], bs.v[n]));
  }
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads)
    out.store(i, layer_norm_value(row[i], mean, inv, w[i], b[i]));
}

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
  template <typename Weights, typename Out>
  __device__ __forceinline__ void finish(const Weights& w, float eps, const Out& out) const {
    x.write_scaled(out, in, w, inverse(eps), width);
  }
  __device__ __forceinline__ void finish(const void* w, WeightType wt, float eps, void* out, WeightType out_type) const {
    finish(RuntimeWeights{w, wt}, eps, RuntimeOutput{out, out_type});
  }
  // 1 / rms(in) (a block sum: every thread calls it), for a caller that scales the values itself (Slice::rms_scaled).
  __device__ __forceinline__ float inverse(float eps) const {
    float sq = x.sum_of_squares();
    for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) sq = __fmaf_rn(in[i], in[i], sq);
    return rsqrtf(block_sum<kThreads>(sq) / float(width) + eps);
  }
};

}  // namespace qvl::cuda
