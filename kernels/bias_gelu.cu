// Grid-stride, memory-bound (8 bytes an element): the bias is added exactly as add_bias does and the GELU is the
// element-wise kernel's (activation.cuh), so the result equals the unfused pair bit for bit.
#include <algorithm>

#include "activation.cuh"
#include "bias_gelu.cuh"
#include "common.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

template <bool kTanh>
__global__ void bias_gelu_kernel(float* y, const void* bias, WeightType bias_type, int64_t cols, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = y[i] + load_weight(bias, bias_type, i % cols);
    y[i] = kTanh ? gelu_tanh(v) : gelu_erf(v);
  }
}

}  // namespace

void bias_gelu(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, bool tanh_form,
               cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const auto blocks = unsigned(std::min<int64_t>((n + 255) / 256, 4096));
  if (tanh_form) bias_gelu_kernel<true><<<blocks, 256, 0, stream>>>(y, bias, bias_type, cols, n);
  else bias_gelu_kernel<false><<<blocks, 256, 0, stream>>>(y, bias, bias_type, cols, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
