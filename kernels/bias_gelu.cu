// Memory-bound (8 bytes an element): the bias is added exactly as add_bias does and the GELU is the
// element-wise kernel's (activation.cuh), so the result equals the unfused pair bit for bit.
#include <algorithm>

#include "activation.cuh"
#include "bias_gelu.cuh"
#include "common.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

// Blocks walk rows, threads columns (as add_bias: no 64-bit division an element).
template <bool kTanh>
__global__ void bias_gelu_kernel(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols) {
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float b = load_weight(bias, bias_type, c);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
      const float v = y[r * cols + c] + b;
      y[r * cols + c] = kTanh ? gelu_tanh(v) : gelu_erf(v);
    }
  }
}

}  // namespace

void bias_gelu(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, bool tanh_form,
               cudaStream_t stream) {
  if (rows * cols == 0) return;
  const auto blocks = unsigned(std::min<int64_t>(rows, 4096));
  if (tanh_form) bias_gelu_kernel<true><<<blocks, 256, 0, stream>>>(y, bias, bias_type, rows, cols);
  else bias_gelu_kernel<false><<<blocks, 256, 0, stream>>>(y, bias, bias_type, rows, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
