// Same layout as gemv.cu (one warp per output row, 16-byte loads, unrolled so several are in flight), over two
// weight matrices at once.
#include "common.cuh"
#include "gemv_swiglu.cuh"
#include "vec16.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 4;

template <typename W, int M>
__global__ void gemv_swiglu_kernel(const float* __restrict__ x, const W* __restrict__ gate, const W* __restrict__ up,
                                   float* __restrict__ y, int64_t n, int64_t k) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  constexpr int kVec = Vec16<W>::kCount;
  const W* gr = gate + row * k;
  const W* ur = up + row * k;
  float acc_gate[M] = {}, acc_up[M] = {};
#pragma unroll 2
  for (int64_t i = int64_t(lane) * kVec; i < k; i += 32 * kVec) {
    float g[kVec], u[kVec];
    Vec16<W>::load(gr + i, g);
    Vec16<W>::load(ur + i, u);
    for (int m = 0; m < M; ++m) {
      const float* xm = x + m * k + i;
      for (int j = 0; j < kVec; ++j) {
        acc_gate[m] += xm[j] * g[j];
        acc_up[m] += xm[j] * u[j];
      }
    }
  }
  for (int m = 0; m < M; ++m) {
    const float g = warp_sum(acc_gate[m]), u = warp_sum(acc_up[m]);
    if (lane == 0) y[m * n + row] = g / (1.0f + expf(-g)) * u;
  }
}

template <typename W>
void launch(const float* x, const void* gate, const void* up, float* y, int64_t m, int64_t n, int64_t k,
            cudaStream_t stream) {
  const auto* g = static_cast<const W*>(gate);
  const auto* u = static_cast<const W*>(up);
  const dim3 grid(unsigned((n + kWarps - 1) / kWarps));
  switch (m) {
    case 1: gemv_swiglu_kernel<W, 1><<<grid, kWarps * 32, 0, stream>>>(x, g, u, y, n, k); break;
    case 2: gemv_swiglu_kernel<W, 2><<<grid, kWarps * 32, 0, stream>>>(x, g, u, y, n, k); break;
    case 3: gemv_swiglu_kernel<W, 3><<<grid, kWarps * 32, 0, stream>>>(x, g, u, y, n, k); break;
    default: gemv_swiglu_kernel<W, 4><<<grid, kWarps * 32, 0, stream>>>(x, g, u, y, n, k); break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool gemv_swiglu_fits(const float* x, const void* gate, const void* up, WeightType w_type, int64_t m, int64_t k) {
  const int64_t vec = w_type == WeightType::F32 ? 4 : 8;  // elements per 16-byte load
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return m <= 4 && k % vec == 0 && aligned(x) && aligned(gate) && aligned(up);
}

void gemv_swiglu(const float* x, const void* gate, const void* up, WeightType w_type, float* y, int64_t m, int64_t n,
                 int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  if (w_type == WeightType::BF16) launch<uint16_t>(x, gate, up, y, m, n, k, stream);
  else if (w_type == WeightType::F16) launch<__half>(x, gate, up, y, m, n, k, stream);
  else launch<float>(x, gate, up, y, m, n, k, stream);
}

}  // namespace qvl::cuda
