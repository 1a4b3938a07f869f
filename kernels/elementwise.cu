// Grid-stride loops; purely memory-bound (8 or 12 bytes per element), so one kernel shape serves all four ops.
#include <algorithm>

#include "activation.cuh"
#include "common.cuh"
#include "elementwise.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

template <typename Y> __global__ void elementwise_kernel(Elementwise op, const float* a, const float* b, Y* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = a[i];
    switch (op) {
      case Elementwise::Add: store_as(y, i, v + b[i]); break;
      case Elementwise::SiluMul: store_as(y, i, v / (1.0f + expf(-v)) * b[i]); break;
      case Elementwise::GeluTanh: store_as(y, i, gelu_tanh(v)); break;
      case Elementwise::GeluErf: store_as(y, i, gelu_erf(v)); break;
    }
  }
}

}  // namespace

void elementwise(Elementwise op, const float* a, const float* b, void* y, WeightType y_type, int64_t n,
                 cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const auto blocks = unsigned(std::min<int64_t>((n + threads - 1) / threads, 4096));
  with_element_type(y_type, [&](auto element) {
    using Y = decltype(element);
    elementwise_kernel<Y><<<blocks, threads, 0, stream>>>(op, a, b, static_cast<Y*>(y), n);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
