// One block per row; statistics in f32 with a warp-then-block reduction. Memory-bound: 2 reads + 1 write per element.
#include "common.cuh"
#include "weights.cuh"
#include "norm.cuh"
#include "row_slice.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;

constexpr int kPerThread = 16;  // rows up to 4096 wide are read once, into registers (RowSlice)

// y may alias x (q/k norms run in place): each thread reads its elements before it writes them.
__global__ void rms_norm_kernel(const float* x, const void* w, WeightType wt, float eps, void* y, WeightType yt,
                                int64_t width) {
  const int64_t offset = int64_t(blockIdx.x) * width;
  RmsNormRow<kThreads, kPerThread> row;
  row.load(x + offset, width);
  row.finish(w, wt, eps, activation_row(y, yt, offset), yt);
}

__global__ void layer_norm_kernel(const float* x, const void* w, WeightType wt, const void* b, WeightType bt, float eps,
                                  void* y, WeightType yt, int64_t width) {
  const float* in = x + int64_t(blockIdx.x) * width;
  void* out = activation_row(y, yt, int64_t(blockIdx.x) * width);
  float sum = 0;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) sum += in[i];
  const float mean = block_sum<kThreads>(sum) / float(width);
  float var = 0;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) var = add_squared_deviation(var, in[i], mean);
  const float inv = rsqrtf(block_sum<kThreads>(var) / float(width) + eps);
  for (int64_t i = threadIdx.x; i < width; i += kThreads)
    store_activation(out, yt, i, layer_norm_value(in[i], mean, inv, load_weight(w, wt, i), load_weight(b, bt, i)));
}

}  // namespace

void rms_norm(const RowNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  rms_norm_kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(a.x, a.w, a.w_type, a.eps, a.y, a.y_type, a.width);
  CUDA_CHECK_LAUNCH();
}

void layer_norm(const RowNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  layer_norm_kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(a.x, a.w, a.w_type, a.b, a.b_type, a.eps, a.y, a.y_type,
                                                               a.width);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
