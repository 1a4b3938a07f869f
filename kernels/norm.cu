// One block per row; statistics in f32 with a warp-then-block reduction. Memory-bound: 2 reads + 1 write per element.
#include "common.cuh"
#include "weights.cuh"
#include "layer_norm_rows.cuh"
#include "norm.cuh"
#include "row_slice.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;

constexpr int kPerThread = 16;  // rows up to 4096 wide are read once, into registers (RowSlice)

// y may alias x (q/k norms run in place): each thread reads its elements before it writes them. W, Y: the weights'
// and the output's element types (weights.cuh, with_element_type).
template <int kSlots, typename W, typename Y>
__global__ void rms_norm_kernel(const float* x, const W* w, float eps, Y* y, int64_t width) {
  const int64_t offset = int64_t(blockIdx.x) * width;
  RmsNormRow<kThreads, kSlots> row;  // 8 a thread up to 2048 wide, as the GEMVs' folded norm (the same sums)
  row.load(x + offset, width);
  row.finish(TypedWeights<W>{w}, eps, TypedOutput<Y>{y + offset});
}

// A block a row, for rows the warp layout does not take (wider than 1,024, or w and b of different types, which no
// checkpoint of ours has: then read as RuntimeWeights).
template <typename Weights, typename Out>
__global__ void layer_norm_kernel(const float* x, Weights w, Weights b, float eps, Out y, int64_t width) {
  const int64_t offset = int64_t(blockIdx.x) * width;
  RowSlice<kThreads, kPerThread> slice;
  slice.load(x + offset, width);
  block_layer_norm(slice, x + offset, width, w, b, eps, y.row(offset));
}

}  // namespace

void rms_norm(const RowNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  with_element_type(a.w_type, [&](auto w) {
    with_element_type(a.y_type, [&](auto y) {
      using W = decltype(w);
      using Y = decltype(y);
      const auto kernel = a.width <= kThreads * 8 ? rms_norm_kernel<8, W, Y> : rms_norm_kernel<kPerThread, W, Y>;
      kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(a.x, static_cast<const W*>(a.w), a.eps, static_cast<Y*>(a.y),
                                                        a.width);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void layer_norm(const RowNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (layer_norm_rows_fit(a)) {
    launch_layer_norm_rows<false>(a, stream);
  } else if (a.b_type != a.w_type) {
    layer_norm_kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(a.x, RuntimeWeights{a.w, a.w_type},
                                                                 RuntimeWeights{a.b, a.b_type}, a.eps,
                                                                 RuntimeOutput{a.y, a.y_type}, a.width);
  } else {
    with_element_type(a.w_type, [&](auto w) {
      with_element_type(a.y_type, [&](auto y) {
        using W = decltype(w);
        using Y = decltype(y);
        layer_norm_kernel<<<unsigned(a.rows), kThreads, 0, stream>>>(
            a.x, TypedWeights<W>{static_cast<const W*>(a.w)}, TypedWeights<W>{static_cast<const W*>(a.b)}, a.eps,
            TypedOutput<Y>{static_cast<Y*>(a.y)}, a.width);
      });
    });
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
