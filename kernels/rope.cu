// One thread per rotation pair: reads 2 values and 4 table entries, writes 2. The tables are shared by the heads
// of a row, so they stay in L1/L2.
#include <algorithm>

#include "common.cuh"
#include "rope.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

__global__ void rope_kernel(float* x, const float* cos, const float* sin, int64_t s, int64_t h, int64_t d) {
  const int64_t half = d / 2;
  const int64_t pairs = s * h * half;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = p % half, row = p / half / h;
    float* v = x + (p / half) * d;
    const float a = v[e], b = v[e + half];
    rope_rotate(a, b, cos[row * d + e], sin[row * d + e], cos[row * d + e + half], sin[row * d + e + half], v[e],
                v[e + half]);
  }
}

}  // namespace

void rope(float* x, const float* cos, const float* sin, int64_t s, int64_t h, int64_t d, cudaStream_t stream) {
  const int64_t pairs = s * h * (d / 2);
  if (pairs == 0) return;
  rope_kernel<<<unsigned(std::min<int64_t>((pairs + 255) / 256, 4096)), 256, 0, stream>>>(x, cos, sin, s, h, d);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
