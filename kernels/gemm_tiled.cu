// Classic shared-memory tiling: a 256-thread block computes a 64 x 64 tile of y, walking K in steps of 16; both
// operands are staged in shared memory as f32 (transposed, rows padded by 4 floats so the 16-byte reads of the
// inner loop stay aligned), and each thread accumulates a 4 x 4 register tile from two float4 reads per k, i.e.
// 16 FMAs per 2 shared loads. Bytes from DRAM: (M·K·4)·N/64 + (N·K·w)·M/64, so for M, N >= 64 it is compute-bound;
// it aims at the f32 (CUDA core) roofline, 8.9 TFLOP/s on a GTX 1080 by its specification. Measured on an H100 (SM61
// profile, qvl-test-backend-ops perf, 512 rows): 15-21 TFLOP/s. 8.5 KB of shared memory per block.
#include "common.cuh"
#include "gemm_tiled.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kTile = 64, kStep = 16, kThreads = 256;

template <typename W>
__global__ void __launch_bounds__(kThreads)
    gemm_tiled_kernel(const float* __restrict__ x, const W* __restrict__ w, const void* __restrict__ bias,
                      WeightType bias_type, float* __restrict__ y, int64_t m, int64_t n, int64_t k) {
  __shared__ __align__(16) float xs[kStep][kTile + 4];
  __shared__ __align__(16) float ws[kStep][kTile + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  // Loading: thread t brings 4 consecutive k of row t / 4 (64 bytes per 4 threads: coalesced along K).
  const int load_row = tid / 4, load_k = (tid % 4) * 4;
  const bool x_row_ok = row0 + load_row < m, w_row_ok = col0 + load_row < n;
  const float* x_row = x + (row0 + load_row) * k;
  const W* w_row = w + (col0 + load_row) * k;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kStep) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t kk = k0 + load_k + j;
      xs[load_k + j][load_row] = x_row_ok && kk < k ? x_row[kk] : 0.0f;
      ws[load_k + j][load_row] = w_row_ok && kk < k ? widen(w_row[kk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kStep; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&xs[kk][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&ws[kk][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t col = col0 + tx * 4 + j;
    if (col >= n) continue;
    const float b = bias ? load_weight(bias, bias_type, col) : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = row0 + ty * 4 + i;
      if (row < m) y[row * n + col] = acc[i][j] + b;
    }
  }
}

template <typename W>
void launch(const float* x, const void* w, const void* bias, WeightType bias_type, float* y, int64_t m, int64_t n,
            int64_t k, cudaStream_t stream) {
  const dim3 grid(unsigned((n + kTile - 1) / kTile), unsigned((m + kTile - 1) / kTile));
  gemm_tiled_kernel<W><<<grid, kThreads, 0, stream>>>(x, static_cast<const W*>(w), bias, bias_type, y, m, n, k);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void gemm_tiled(const MatmulArgs& a, cudaStream_t stream) {
  if (a.m == 0 || a.n == 0) return;
  if ((a.m + kTile - 1) / kTile > 65535) throw std::runtime_error("gemm_tiled: more than 4 million rows");
  switch (a.w_type) {
    case WeightType::BF16: launch<uint16_t>(a.x, a.w, a.bias, a.bias_type, a.y, a.m, a.n, a.k, stream); break;
    case WeightType::F16: launch<__half>(a.x, a.w, a.bias, a.bias_type, a.y, a.m, a.n, a.k, stream); break;
    default: launch<float>(a.x, a.w, a.bias, a.bias_type, a.y, a.m, a.n, a.k, stream); break;
  }
}

}  // namespace qvl::cuda
