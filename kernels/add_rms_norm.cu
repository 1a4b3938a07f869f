// One block per row. Each thread keeps its strided slice of the summed row in registers between the add and the
// scale (up to kPerThread elements: 2048-wide rows need 8 per thread at 256 threads), so x is read once.
#include "add_rms_norm.cuh"
#include "common.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 16;  // rows up to 4096 wide stay in registers; wider rows re-read x (still correct)

__global__ void add_rms_norm_kernel(float* x, const float* residual, const void* w, WeightType wt, float eps, float* y,
                                    int64_t width) {
  float* row = x + int64_t(blockIdx.x) * width;
  const float* res = residual + int64_t(blockIdx.x) * width;
  float* out = y + int64_t(blockIdx.x) * width;
  float kept[kPerThread];  // unrolled with constant indices, so these live in registers
  float sq = 0;
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int64_t i = threadIdx.x + int64_t(n) * kThreads;
    kept[n] = i < width ? row[i] + res[i] : 0.0f;
    if (i < width) row[i] = kept[n];
    sq += kept[n] * kept[n];
  }
  for (int64_t i = threadIdx.x + int64_t(kPerThread) * kThreads; i < width; i += kThreads) {
    row[i] += res[i];
    sq += row[i] * row[i];
  }
  const float inv = rsqrtf(block_sum<kThreads>(sq) / float(width) + eps);
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int64_t i = threadIdx.x + int64_t(n) * kThreads;
    if (i < width) out[i] = load_weight(w, wt, i) * (kept[n] * inv);
  }
  for (int64_t i = threadIdx.x + int64_t(kPerThread) * kThreads; i < width; i += kThreads)
    out[i] = load_weight(w, wt, i) * (row[i] * inv);
}

}  // namespace

void add_rms_norm(float* x, const float* residual, const void* w, WeightType w_type, float eps, float* y, int64_t rows,
                  int64_t width, cudaStream_t stream) {
  if (rows == 0) return;
  add_rms_norm_kernel<<<unsigned(rows), kThreads, 0, stream>>>(x, residual, w, w_type, eps, y, width);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
