// One warp per output column n and a tile of up to 8 activation rows: the warp reads its weight row once per tile
// (coalesced: lanes take consecutive k) and reduces with shuffles. Bytes: N·K·sizeof(w) per tile of rows, so decode
// (M = 1) streams the weights once; a first, simple kernel aimed at correctness on every architecture, not yet at
// the bandwidth roofline (the tuned GEMV and the tensor-core GEMM come with the fused kernels).
#include "common.cuh"
#include "weights.cuh"
#include "linear.cuh"

namespace qvl::cuda {
namespace {

constexpr int kRowsPerWarp = 8;
constexpr int kWarpsPerBlock = 8;

__global__ void linear_kernel(const float* __restrict__ x, const void* __restrict__ w, WeightType w_type,
                              const void* __restrict__ bias, WeightType bias_type, float* __restrict__ y, int64_t m,
                              int64_t n, int64_t k) {
  const int lane = threadIdx.x % 32;
  const int64_t col = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int64_t row0 = int64_t(blockIdx.y) * kRowsPerWarp;
  if (col >= n) return;
  float acc[kRowsPerWarp] = {};
  const int rows = int(m - row0 < kRowsPerWarp ? m - row0 : kRowsPerWarp);
  const char* wrow = static_cast<const char*>(w);
  const int64_t element = w_type == WeightType::F32 ? 4 : 2;
  for (int64_t i = lane; i < k; i += 32) {
    const float wv = load_weight(wrow + col * k * element, w_type, i);
    for (int r = 0; r < rows; ++r) acc[r] += x[(row0 + r) * k + i] * wv;
  }
  const float b = bias ? load_weight(bias, bias_type, col) : 0.0f;
  for (int r = 0; r < rows; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0) y[(row0 + r) * n + col] = s + b;
  }
}

}  // namespace

void linear(const float* x, const void* w, WeightType w_type, const void* bias, WeightType bias_type, float* y,
            int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  const dim3 grid(unsigned((n + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned((m + kRowsPerWarp - 1) / kRowsPerWarp));
  linear_kernel<<<grid, kWarpsPerBlock * 32, 0, stream>>>(x, w, w_type, bias, bias_type, y, m, n, k);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
