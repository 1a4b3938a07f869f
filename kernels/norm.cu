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
__global__ void rms_norm_kernel(const float* x, const void* w, WeightType wt, float eps, float* y, int64_t width) {
  using Slice = RowSlice<kThreads, kPerThread>;
  const float* in = x + int64_t(blockIdx.x) * width;
  float* out = y + int64_t(blockIdx.x) * width;
  Slice slice;
  slice.load(in, width);
  float sq = slice.sum_of_squares();
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) sq += in[i] * in[i];
  const float inv = rsqrtf(block_sum<kThreads>(sq) / float(width) + eps);
  slice.write_scaled(out, in, w, wt, inv, width);
}

__global__ void layer_norm_kernel(const float* x, const void* w, WeightType wt, const void* b, WeightType bt, float eps,
                                  float* y, int64_t width) {
  const float* in = x + int64_t(blockIdx.x) * width;
  float* out = y + int64_t(blockIdx.x) * width;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) sum += in[i];
  const float mean = block_sum<kThreads>(sum) / float(width);
  float var = 0;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) var = add_squared_deviation(var, in[i], mean);
  const float inv = rsqrtf(block_sum<kThreads>(var) / float(width) + eps);
  for (int64_t i = threadIdx.x; i < width; i += kThreads)
    out[i] = layer_norm_value(in[i], mean, inv, load_weight(w, wt, i), load_weight(b, bt, i));
}

}  // namespace

void rms_norm(const float* x, const void* w, WeightType w_type, float eps, float* y, int64_t rows, int64_t width,
              cudaStream_t stream) {
  if (rows == 0) return;
  rms_norm_kernel<<<unsigned(rows), kThreads, 0, stream>>>(x, w, w_type, eps, y, width);
  CUDA_CHECK_LAUNCH();
}

void layer_norm(const float* x, const void* w, WeightType w_type, const void* b, WeightType b_type, float eps, float* y,
                int64_t rows, int64_t width, cudaStream_t stream) {
  if (rows == 0) return;
  layer_norm_kernel<<<unsigned(rows), kThreads, 0, stream>>>(x, w, w_type, b, b_type, eps, y, width);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
