// One block per row. The summed row stays in registers between the add and the scale (RowSlice), so x and the
// residual are each read once, and all of a thread's loads are in flight together.
#include "add_rms_norm.cuh"
#include "common.cuh"
#include "row_slice.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 16;  // rows up to 4096 wide stay in registers; wider rows finish in a plain loop

__global__ void add_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ residual, const void* __restrict__ w,
                                    WeightType wt, float eps, void* __restrict__ y, WeightType yt, int64_t width) {
  using Slice = RowSlice<kThreads, kPerThread>;
  float* row = x + int64_t(blockIdx.x) * width;
  const float* res = residual + int64_t(blockIdx.x) * width;
  void* out = activation_row(y, yt, int64_t(blockIdx.x) * width);
  Slice sum;
  sum.load_sum(row, res, width);
  float sq = sum.sum_of_squares();
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) sq += row[i] * row[i];
  const float inv = rsqrtf(block_sum<kThreads>(sq) / float(width) + eps);
  sum.write_scaled(out, yt, row, w, wt, inv, width);
}

}  // namespace

void add_rms_norm(const RowNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  add_rms_norm_kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(a.x, a.residual, a.w, a.w_type, a.eps, a.y, a.y_type,
                                                                 a.width);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
