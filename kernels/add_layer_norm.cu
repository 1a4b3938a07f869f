// One block per row, as add_rms_norm.cu: the summed row stays in registers (RowSlice) for the mean, the variance
// (two passes over registers) and the output, with layer_norm's arithmetic in norm.cu step for step: the same bits.
#include "add_layer_norm.cuh"
#include "common.cuh"
#include "row_slice.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 16;  // rows up to 4096 wide stay in registers; wider rows finish in plain loops

__global__ void add_layer_norm_kernel(float* __restrict__ x, const float* __restrict__ residual,
                                      const void* __restrict__ residual_bias, WeightType rbt,
                                      const void* __restrict__ w, WeightType wt, const void* __restrict__ b,
                                      WeightType bt, float eps, void* __restrict__ y, WeightType yt, int64_t width) {
  using Slice = RowSlice<kThreads, kPerThread>;
  float* row = x + int64_t(blockIdx.x) * width;
  const float* res = residual + int64_t(blockIdx.x) * width;
  void* out = activation_row(y, yt, int64_t(blockIdx.x) * width);
  Slice sum;
  sum.load_sum(row, res, width, residual_bias, rbt);
  float total = sum.sum();
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) total += row[i];
  const float mean = block_sum<kThreads>(total) / float(width);
  float var = 0;
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int64_t i = threadIdx.x + int64_t(n) * kThreads;
    if (i < width) var = add_squared_deviation(var, sum.v[n], mean);
  }
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) var = add_squared_deviation(var, row[i], mean);
  const float inv = rsqrtf(block_sum<kThreads>(var) / float(width) + eps);
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int64_t i = threadIdx.x + int64_t(n) * kThreads;
    if (i < width)
      store_activation(out, yt, i, layer_norm_value(sum.v[n], mean, inv, load_weight(w, wt, i), load_weight(b, bt, i)));
  }
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads)
    store_activation(out, yt, i, layer_norm_value(row[i], mean, inv, load_weight(w, wt, i), load_weight(b, bt, i)));
}

}  // namespace

void add_layer_norm(const RowNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  add_layer_norm_kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(a.x, a.residual, a.residual_bias,
                                                                   a.residual_bias_type, a.w, a.w_type, a.b, a.b_type,
                                                                   a.eps, a.y, a.y_type, a.width);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
