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

template <bool kTanh, typename Y>
__global__ void bias_gelu_kernel(const float* y, Y* out, const void* bias, WeightType bias_type, int64_t rows,
                                 int64_t cols, bool four) {
  for_each_with_bias(y, out, bias, bias_type, rows, cols, four, bias_gelu_value<kTanh>);
}

}  // namespace

void bias_gelu(const BiasGeluArgs& a, cudaStream_t stream) {
  if (a.rows * a.cols == 0) return;
  const bool four = by_four(a.y, a.rows, a.cols) && reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  const unsigned blocks = bias_blocks(a.rows, a.cols, four);
  with_element_type(a.out_type, [&](auto element) {
    using Y = decltype(element);
    const auto kernel = a.tanh_form ? bias_gelu_kernel<true, Y> : bias_gelu_kernel<false, Y>;
    kernel<<<blocks, 256, 0, stream>>>(a.y, static_cast<Y*>(a.out), a.bias, a.bias_type, a.rows, a.cols, four);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
