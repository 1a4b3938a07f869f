// Memory-bound (8 bytes an element): the bias is added exactly as add_bias does and the GELU is the
// element-wise kernel's (activation.cuh), so the result equals the unfused pair bit for bit.
#include <algorithm>

#include "activation.cuh"
#include "bias_gelu.cuh"
#include "common.cuh"
#include "convert.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

// Four columns a thread where whole float4s fit a 32-bit index (as add_bias, convert.cu): the column from a 32-bit
// remainder, not a 64-bit one an element.
template <bool kTanh> __device__ __forceinline__ float bias_gelu_value(float y, float bias) {
  const float v = y + bias;
  return kTanh ? gelu_tanh(v) : gelu_erf(v);
}

template <bool kTanh>
__global__ void bias_gelu_kernel(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols,
                                 bool four) {
  if (four) {
    const int quads = int(rows * cols / 4), row_quads = int(cols / 4);
    for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < quads; i += int(gridDim.x * blockDim.x)) {
      const int c = (i % row_quads) * 4;
      float4 v = reinterpret_cast<float4*>(y)[i];
      v.x = bias_gelu_value<kTanh>(v.x, load_weight(bias, bias_type, c));
      v.y = bias_gelu_value<kTanh>(v.y, load_weight(bias, bias_type, c + 1));
      v.z = bias_gelu_value<kTanh>(v.z, load_weight(bias, bias_type, c + 2));
      v.w = bias_gelu_value<kTanh>(v.w, load_weight(bias, bias_type, c + 3));
      reinterpret_cast<float4*>(y)[i] = v;
    }
    return;
  }
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bias_gelu_value<kTanh>(y[i], load_weight(bias, bias_type, i % cols));
}

}  // namespace

void bias_gelu(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, bool tanh_form,
               cudaStream_t stream) {
  if (rows * cols == 0) return;
  const bool four = by_four(y, rows, cols);
  const auto blocks = unsigned(std::min<int64_t>((rows * cols / (four ? 4 : 1) + 255) / 256, 4096));
  if (tanh_form) bias_gelu_kernel<true><<<blocks, 256, 0, stream>>>(y, bias, bias_type, rows, cols, four);
  else bias_gelu_kernel<false><<<blocks, 256, 0, stream>>>(y, bias, bias_type, rows, cols, four);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
