// One block per row. The summed row stays in registers between the add and the scale (RowSlice), so x and the
// residual are each read once, and all of a thread's loads are in flight together. Templated on the weights' and
// the output's element types (weights.cuh, with_element_type).
#include "add_rms_norm.cuh"
#include "common.cuh"
#include "row_slice.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;
// Rows up to 4096 wide stay in registers (16 a thread; 8 up to 2048, half the unrolled code: the same sums, as the
// slots past a row's end add zeros); wider rows finish in a plain loop.
template <int kPerThread, typename W, typename Y>
__global__ void add_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ residual, const W* __restrict__ w,
                                    float eps, Y* __restrict__ y, int64_t width) {
  using Slice = RowSlice<kThreads, kPerThread>;
  float* row = x + int64_t(blockIdx.x) * width;
  const float* res = residual + int64_t(blockIdx.x) * width;
  Slice sum;
  sum.load_sum(row, res, width, NoBias{});
  float sq = sum.sum_of_squares();
  for (int64_t i = threadIdx.x + Slice::kCapacity; i < width; i += kThreads) sq = __fmaf_rn(row[i], row[i], sq);
  const float inv = rsqrtf(block_sum<kThreads>(sq) / float(width) + eps);
  sum.write_scaled(TypedOutput<Y>{y + int64_t(blockIdx.x) * width}, row, TypedWeights<W>{w}, inv, width);
}

}  // namespace

void add_rms_norm(const RowNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  with_element_type(a.w_type, [&](auto w) {
    with_element_type(a.y_type, [&](auto y) {
      using W = decltype(w);
      using Y = decltype(y);
      const auto kernel = a.width <= kThreads * 8 ? add_rms_norm_kernel<8, W, Y> : add_rms_norm_kernel<16, W, Y>;
      kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(a.x, a.residual, static_cast<const W*>(a.w), a.eps,
                                                        static_cast<Y*>(a.y), a.width);
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
