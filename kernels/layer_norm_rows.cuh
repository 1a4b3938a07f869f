#pragma once
// LayerNorm (and the fused residual add before it) for rows up to 1,024 wide: one warp a row, eight rows a block,
// the weights' and the output's element types template arguments. The vision tower's norms are 784 rows of 1,024 (a
// 448² picture). One 256-thread block a row with run-time typed loads took 12.4 µs for the fused add + LayerNorm's
// 11.2 MB (H100 timeline); a warp a row with the same loads took as long (17 µs with its loads hoisted); templated,
// 4.7 µs (2.4 TB/s; the plain LayerNorm 8.0 -> 3.1). A warp holds the whole row in registers (float4 loads, all
// issued before the first is used) and reduces with shuffles alone. The plain and the fused kernel both run
// LayerNormRow, so they give the same bits; which layout a row takes depends on its width, the norm's weight types
// and the alignment of what both kernels read (layer_norm_rows_fit), never on the row count.
#include <cstdint>
#include <stdexcept>

#include "norm.cuh"
#include "row_slice.cuh"
#include "weights.cuh"

namespace qvl::cuda {

constexpr int kLayerNormRowsPerBlock = 8;
constexpr int kLayerNormRowChunks = 8;  // 1,024 floats a row: 5 x 32 registers a lane hold the row and its operands

// Whether rows take the warp layout: up to 1,024 wide, a multiple of 4 floats, w and b of one type, and x, y, w, b
// aligned for their vector loads (the pool's tensors always are). The plain and the fused kernel ask this one
// function about what they share, so for the same rows and norm they take the same layout; the fused kernel's own
// operands (the residual, its bias) do not enter into it.
inline bool layer_norm_rows_fit(const RowNormArgs& a) {
  const auto aligned = [](const void* p, WeightType t) {
    return reinterpret_cast<uintptr_t>(p) % (t == WeightType::F32 ? 16 : 8) == 0;
  };
  return a.width > 0 && a.width % 4 == 0 && a.width <= 128 * kLayerNormRowChunks && a.b_type == a.w_type &&
         aligned(a.x, WeightType::F32) && aligned(a.y, a.y_type) && aligned(a.w, a.w_type) && aligned(a.b, a.b_type);
}

// One lane's share of a row: kChunks float4s, element 4·(lane + 32·c) + j of chunk c. Chunks past the row's end hold
// zeros and are never stored. kChunks · 128 ≥ width. Every load (the row, the residual and its bias, the norm's
// weight and bias) is issued before the first store.
template <int kChunks, typename W> struct LayerNormRow {
  float4 v[kChunks], w[kChunks], b[kChunks];
  int lane = 0;
  int64_t width = 0;

  __device__ __forceinline__ bool in_row(int c) const { return 4 * (int64_t(lane) + 32 * c) < width; }
  __device__ __forceinline__ int64_t at(int c) const { return 4 * (int64_t(lane) + 32 * c); }

  // The row (x), and with `res` the fused add: x += res + bias (res + bias rounded first, as the unfused bias kernel
  // stores it), written back to x by store_sum. Then the norm's weights.
  template <typename Bias>
  __device__ __forceinline__ void load(const float* x, const float* res, const Bias& bias, bool with_bias, const W* nw,
                                       const W* nb, int64_t n) {
    lane = threadIdx.x % 32, width = n;
    const float4 zero = make_float4(0, 0, 0, 0);
    float4 add[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const bool in = in_row(c);
      v[c] = in ? load4(x, at(c)) : zero;
      add[c] = in && res ? load4(res, at(c)) : zero;
      const float4 rb = in && with_bias ? load4(bias, at(c)) : zero;
      w[c] = in ? load4(nw, at(c)) : zero;
      b[c] = in ? load4(nb, at(c)) : zero;
      if (with_bias) add[c].x += rb.x, add[c].y += rb.y, add[c].z += rb.z, add[c].w += rb.w;
    }
    if (!res) return;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) v[c].x += add[c].x, v[c].y += add[c].y, v[c].z += add[c].z, v[c].w += add[c].w;
  }
  __device__ __forceinline__ void store_sum(float* x) const {
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      if (in_row(c)) store4(x, at(c), v[c]);
  }
  // y = w ⊙ (x − mean) / sqrt(var + eps) + b.
  template <typename Y> __device__ __forceinline__ void finish(float eps, Y* y) const {
    float total = 0;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) total += (v[c].x + v[c].y) + (v[c].z + v[c].w);
    const float mean = warp_sum(total) / float(width);
    float var = 0;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (!in_row(c)) continue;
      var = add_squared_deviation(var, v[c].x, mean), var = add_squared_deviation(var, v[c].y, mean);
      var = add_squared_deviation(var, v[c].z, mean), var = add_squared_deviation(var, v[c].w, mean);
    }
    const float inv = rsqrtf(warp_sum(var) / float(width) + eps);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (!in_row(c)) continue;
      store4(y, at(c),
             make_float4(layer_norm_value(v[c].x, mean, inv, w[c].x, b[c].x),
                         layer_norm_value(v[c].y, mean, inv, w[c].y, b[c].y),
                         layer_norm_value(v[c].z, mean, inv, w[c].z, b[c].z),
                         layer_norm_value(v[c].w, mean, inv, w[c].w, b[c].w)));
    }
  }
};

// The plain LayerNorm (kAdd false) and the fused add + LayerNorm, a warp a row. Bias: how the residual's bias is
// read (TypedWeights<W> where it is of the norm's type, else RuntimeWeights: the same widened values).
template <bool kAdd, int kChunks, typename W, typename Y, typename Bias>
__global__ void __launch_bounds__(32 * kLayerNormRowsPerBlock) layer_norm_rows_kernel(RowNormArgs a, Bias bias) {
  const int64_t r = int64_t(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (r >= a.rows) return;
  LayerNormRow<kChunks, W> row;
  float* x = a.x + r * a.width;
  row.load(x, kAdd ? a.residual + r * a.width : nullptr, bias, kAdd && a.residual_bias, static_cast<const W*>(a.w),
           static_cast<const W*>(a.b), a.width);
  if (kAdd) row.store_sum(x);
  row.finish(a.eps, static_cast<Y*>(a.y) + r * a.width);
}

template <bool kAdd> void launch_layer_norm_rows(const RowNormArgs& a, cudaStream_t stream) {
  if (kAdd && reinterpret_cast<uintptr_t>(a.residual) % 16 != 0)
    throw std::runtime_error("add+layer_norm: the residual is not 16-byte aligned (not a pool tensor)");
  const unsigned blocks = unsigned((a.rows + kLayerNormRowsPerBlock - 1) / kLayerNormRowsPerBlock);
  with_element_type(a.w_type, [&](auto w) {
    with_element_type(a.y_type, [&](auto y) {
      using W = decltype(w);
      using Y = decltype(y);
      const bool typed_bias = !kAdd || (a.residual_bias_type == a.w_type &&
                                         reinterpret_cast<uintptr_t>(a.residual_bias) % (4 * sizeof(W)) == 0);
      if (typed_bias)
        layer_norm_rows_kernel<kAdd, kLayerNormRowChunks, W, Y><<<blocks, 32 * kLayerNormRowsPerBlock, 0, stream>>>(
            a, TypedWeights<W>{static_cast<const W*>(a.residual_bias)});
      else
        layer_norm_rows_kernel<kAdd, kLayerNormRowChunks, W, Y><<<blocks, 32 * kLayerNormRowsPerBlock, 0, stream>>>(
            a, RuntimeWeights{a.residual_bias, a.residual_bias_type});
    });
  });
}

}  // namespace qvl::cuda
