// GEMV for M <= 4 activation rows (decode): memory-bound, N·K·sizeof(w) bytes for 2·M·N·K FLOPs, so it aims at the
// DRAM roofline: one warp per weight row, 16-byte loads (8 bf16/f16 or 4 f32 per lane per step), the loop unrolled
// so several loads are in flight, f32 accumulation, shuffle reduction.
#include "common.cuh"
#include "gemv.cuh"
#include "vec16.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kGemvWarps = 4;

template <typename W, int M>
__global__ void gemv_kernel(const float* __restrict__ x, const W* __restrict__ w, const void* __restrict__ bias,
                            WeightType bias_type, float* __restrict__ y, int64_t n, int64_t k) {
  const int64_t row = int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  constexpr int kVec = Vec16<W>::kCount;
  const W* wr = w + row * k;
  float acc[M] = {};
#pragma unroll 4
  for (int64_t i = int64_t(lane) * kVec; i < k; i += 32 * kVec) {
    float wv[kVec];
    Vec16<W>::load(wr + i, wv);
    for (int m = 0; m < M; ++m) {
      const float* xm = x + m * k + i;
      for (int j = 0; j < kVec; ++j) acc[m] += xm[j] * wv[j];
    }
  }
  const float b = bias ? load_weight(bias, bias_type, row) : 0.0f;
  for (int m = 0; m < M; ++m) {
    const float s = warp_sum(acc[m]);
    if (lane == 0) y[m * n + row] = s + b;
  }
}

template <typename W>
bool try_gemv(const float* x, const void* w, const void* bias, WeightType bias_type, float* y, int64_t m, int64_t n,
              int64_t k, cudaStream_t stream) {
  constexpr int kVec = Vec16<W>::kCount;
  if (m > 4 || k % kVec != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return false;
  const auto* wt = static_cast<const W*>(w);
  const dim3 grid(unsigned((n + kGemvWarps - 1) / kGemvWarps));
  switch (m) {
    case 1: gemv_kernel<W, 1><<<grid, kGemvWarps * 32, 0, stream>>>(x, wt, bias, bias_type, y, n, k); break;
    case 2: gemv_kernel<W, 2><<<grid, kGemvWarps * 32, 0, stream>>>(x, wt, bias, bias_type, y, n, k); break;
    case 3: gemv_kernel<W, 3><<<grid, kGemvWarps * 32, 0, stream>>>(x, wt, bias, bias_type, y, n, k); break;
    default: gemv_kernel<W, 4><<<grid, kGemvWarps * 32, 0, stream>>>(x, wt, bias, bias_type, y, n, k); break;
  }
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

bool gemv(const float* x, const void* w, WeightType w_type, const void* bias, WeightType bias_type, float* y, int64_t m,
          int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return true;
  return w_type == WeightType::BF16 ? try_gemv<uint16_t>(x, w, bias, bias_type, y, m, n, k, stream)
         : w_type == WeightType::F16 ? try_gemv<__half>(x, w, bias, bias_type, y, m, n, k, stream)
                                     : try_gemv<float>(x, w, bias, bias_type, y, m, n, k, stream);
}

}  // namespace qvl::cuda
