// Memory-bound (6 bytes per element to narrow, 8 per element to add a bias): grid-stride loops, coalesced.
#include <cuda_bf16.h>

#include <algorithm>

#include "bias_columns.cuh"
#include "common.cuh"
#include "convert.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

__global__ void narrow_kernel(const float* x, void* out, WeightType type, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_activation(out, type, i, x[i]);
}

// Four values a thread (16 bytes in, 8 out), the type a template parameter and the index 32-bit: the loop above, a
// 64-bit index and a type switch an element, took 4.75 us for a 784 x 1024 activation on an H100 (CUPTI), about
// 1 TB/s for its 4.8 MB. The same conversions (store4 rounds as store_activation does), so the same bits.
template <typename Y> __global__ void narrow4_kernel(const float4* x, Y* out, int quads) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < quads; i += int(gridDim.x * blockDim.x))
    store4(out, int64_t(i) * 4, x[i]);
}

__global__ void widen_kernel(const void* x, WeightType type, float* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = load_weight(x, type, i);
}

__device__ __forceinline__ float plus(float y, float bias) { return y + bias; }

__global__ void bias_kernel(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, bool four) {
  for_each_with_bias(y, y, bias, bias_type, rows, cols, four, plus);
}

// blockIdx.y picks the output.
__global__ void biases_kernel(Biases b, WeightType bias_type, int64_t rows, int64_t cols, bool four) {
  if (!b.bias[blockIdx.y]) return;
  for_each_with_bias(b.y[blockIdx.y], b.y[blockIdx.y], b.bias[blockIdx.y], bias_type, rows, cols, four, plus);
}

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

bool by_four(const float* y, int64_t rows, int64_t cols) {
  return cols % 4 == 0 && rows * cols < (int64_t(1) << 31) && reinterpret_cast<uintptr_t>(y) % 16 == 0;
}

void narrow_f32(const float* x, void* out, WeightType type, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (type == WeightType::F32) throw std::runtime_error("narrow_f32: the target must be a 16-bit type");
  const bool four = count % 4 == 0 && count < (int64_t(1) << 31) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(out) % 8 == 0;
  if (!four) {
    narrow_kernel<<<blocks_for(count), 256, 0, stream>>>(x, out, type, count);
  } else if (type == WeightType::F16) {
    narrow4_kernel<<<blocks_for(count / 4), 256, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                                             static_cast<__half*>(out), int(count / 4));
  } else {
    narrow4_kernel<<<blocks_for(count / 4), 256, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                                             static_cast<uint16_t*>(out), int(count / 4));
  }
  CUDA_CHECK_LAUNCH();
}

void widen_to_f32(const void* x, WeightType type, float* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  widen_kernel<<<blocks_for(count), 256, 0, stream>>>(x, type, out, count);
  CUDA_CHECK_LAUNCH();
}

void add_bias(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  const bool four = by_four(y, rows, cols);
  bias_kernel<<<bias_blocks(rows, cols, four), 256, 0, stream>>>(y, bias, bias_type, rows, cols, four);
  CUDA_CHECK_LAUNCH();
}

void add_biases(const Biases& b, WeightType bias_type, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0 || b.count == 0) return;
  bool four = true;
  for (int i = 0; i < b.count; ++i) four = four && by_four(b.y[i], rows, cols);
  biases_kernel<<<dim3(bias_blocks(rows, cols, four), unsigned(b.count)), 256, 0, stream>>>(b, bias_type, rows, cols, four);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
