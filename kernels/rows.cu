// One block per row, threads across the width: coalesced reads and writes.
#include "common.cuh"
#include "weights.cuh"
#include "rows.cuh"

namespace qvl::cuda {
namespace {

__global__ void gather_kernel(const void* table, WeightType type, const int64_t* ids, float* y, int64_t width) {
  const int64_t row = ids[blockIdx.x];
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    y[int64_t(blockIdx.x) * width + i] = load_weight(table, type, row * width + i);
}

__global__ void scatter_kernel(float* x, const float* src, const int64_t* rows, int64_t width, bool accumulate) {
  float* dst = x + rows[blockIdx.x] * width;
  const float* s = src + int64_t(blockIdx.x) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = accumulate ? dst[i] + s[i] : s[i];
}

// dst rows [*row, *row + count) = src: the position comes from the device (a recorded decode step).
__global__ void copy_rows_at_kernel(const float* src, float* dst, const int64_t* row, int64_t width) {
  const float* s = src + int64_t(blockIdx.x) * width;
  float* d = dst + (row[0] + int64_t(blockIdx.x)) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

}  // namespace

void copy_rows_at(const float* src, float* dst, const int64_t* row, int64_t count, int64_t width, cudaStream_t stream) {
  if (count == 0) return;
  copy_rows_at_kernel<<<unsigned(count), 256, 0, stream>>>(src, dst, row, width);
  CUDA_CHECK_LAUNCH();
}

void gather_rows(const void* table, WeightType type, const int64_t* ids, float* y, int64_t count, int64_t width,
                 cudaStream_t stream) {
  if (count == 0) return;
  gather_kernel<<<unsigned(count), 256, 0, stream>>>(table, type, ids, y, width);
  CUDA_CHECK_LAUNCH();
}

void scatter_rows(float* x, const float* src, const int64_t* rows, int64_t count, int64_t width, bool accumulate,
                  cudaStream_t stream) {
  if (count == 0) return;
  scatter_kernel<<<unsigned(count), 256, 0, stream>>>(x, src, rows, width, accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
