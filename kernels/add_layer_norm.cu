// Rows up to 1,024 wide: a warp a row (layer_norm_rows.cuh, as the plain LayerNorm). Wider ones (the 8B's mergers):
// one block per row, as add_rms_norm.cu: the summed row stays in registers (RowSlice) for the mean, the variance
// (two passes over registers) and the output, block_layer_norm as the plain LayerNorm runs it: the same bits. Its
// element types are read at run time: a fallback, not tuned (weights.cuh, with_element_type).
#include "add_layer_norm.cuh"
#include "common.cuh"
#include "layer_norm_rows.cuh"
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
  float* row = x + int64_t(blockIdx.x) * width;
  RowSlice<kThreads, kPerThread> sum;
  const float* res = residual + int64_t(blockIdx.x) * width;
  if (residual_bias) sum.load_sum(row, res, width, RuntimeWeights{residual_bias, rbt});
  else sum.load_sum(row, res, width, NoBias{});
  block_layer_norm(sum, row, width, RuntimeWeights{w, wt}, RuntimeWeights{b, bt}, eps,
                   RuntimeOutput{y, yt}.row(int64_t(blockIdx.x) * width));
}

}  // namespace

void add_layer_norm(const RowNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (layer_norm_rows_fit(a)) launch_layer_norm_rows<true>(a, stream);
  else
    add_layer_norm_kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(a.x, a.residual, a.residual_bias,
                                                                     a.residual_bias_type, a.w, a.w_type, a.b,
                                                                     a.b_type, a.eps, a.y, a.y_type, a.width);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
