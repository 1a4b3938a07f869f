// Memory-bound (6 bytes per element to narrow, 8 per element to add a bias): grid-stride loops, coalesced.
#include <cuda_bf16.h>

#include <algorithm>

#include "common.cuh"
#include "convert.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

__global__ void narrow_kernel(const float* x, void* out, WeightType type, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_activation(out, type, i, x[i]);
}

__global__ void bias_kernel(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += load_weight(bias, bias_type, i % cols);
}

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

void narrow_f32(const float* x, void* out, WeightType type, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (type == WeightType::F32) throw std::runtime_error("narrow_f32: the target must be a 16-bit type");
  narrow_kernel<<<blocks_for(count), 256, 0, stream>>>(x, out, type, count);
  CUDA_CHECK_LAUNCH();
}

void add_bias(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  bias_kernel<<<blocks_for(rows * cols), 256, 0, stream>>>(y, bias, bias_type, rows, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
