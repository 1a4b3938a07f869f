#include <cuda_fp16.h>

#include "common.cuh"
#include "dequantize.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

// Value i of a row: its integer times its group's scale.
__device__ __forceinline__ float dequantized(const QuantMatrix& w, int64_t row, int64_t i) {
  const uint8_t* values = w.values + row * w.row_bytes;
  const float d = __half2float(reinterpret_cast<const __half*>(w.scales)[row * w.groups + i / (int64_t(w.blocks_per_group) * kQuantBlock)]);
  if (w.format == QuantFormat::Q8) return d * float(int8_t(values[i]));
  const int64_t block = i / kQuantBlock, j = i % kQuantBlock;
  const uint8_t byte = values[block * kQuantBlock / 2 + j % (kQuantBlock / 2)];
  return d * float(int(j < kQuantBlock / 2 ? byte & 15 : byte >> 4) - 8);
}

__global__ void dequantize_kernel(QuantMatrix w, void* out, WeightType type) {
  const int64_t total = w.rows * w.cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    store_activation(out, type, i, dequantized(w, i / w.cols, i % w.cols));
}

__global__ void gather_kernel(QuantMatrix w, const int64_t* ids, float* y) {
  const int64_t row = ids[blockIdx.x];
  for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x) y[int64_t(blockIdx.x) * w.cols + i] = dequantized(w, row, i);
}

}  // namespace

void dequantize(const QuantMatrix& w, void* out, WeightType type, cudaStream_t stream) {
  const int64_t total = w.rows * w.cols;
  if (total == 0) return;
  dequantize_kernel<<<unsigned(std::min<int64_t>((total + 255) / 256, 65536)), 256, 0, stream>>>(w, out, type);
  CUDA_CHECK_LAUNCH();
}

void gather_quantized_rows(const QuantMatrix& w, const int64_t* ids, float* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  gather_kernel<<<unsigned(count), 256, 0, stream>>>(w, ids, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
