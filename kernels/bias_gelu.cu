// Memory-bound (8 bytes an element): the bias is added exactly as add_bias does and the GELU is the
// element-wise kernel's (activation.cuh), so the result equals the unfused pair bit for bit.
#include <algorithm>

#include "activation.cuh"
#include "bias_columns.cuh"
#include "bias_gelu.cuh"
#include "common.cuh"
#include "convert.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

template <bool kTanh> __device__ __forceinline__ float bias_gelu_value(float y, float bias) {
  const float v = y + bias;
  return kTanh ? gelu_tanh(v) : gelu_erf(v);
}

template <bool kTanh>
__global__ void bias_gelu_kernel(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, bool four) {
  for_each_with_bias(y, bias, bias_type, rows, cols, four, bias_gelu_value<kTanh>);
}

}  // namespace

void bias_gelu(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, bool tanh_form,
               cudaStream_t stream) {
  if (rows * cols == 0) return;
  const bool four = by_four(y, rows, cols);
  const unsigned blocks = bias_blocks(rows, cols, four);
  if (tanh_form) bias_gelu_kernel<true><<<blocks, 256, 0, stream>>>(y, bias, bias_type, rows, cols, four);
  else bias_gelu_kernel<false><<<blocks, 256, 0, stream>>>(y, bias, bias_type, rows, cols, four);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
