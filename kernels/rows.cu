// One block per row, threads across the width: coalesced reads and writes.
#include "common.cuh"
#include "kv_cache.cuh"
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

// dst rows [first, first + count) = src, first possibly from the device (a recorded decode step).
template <typename KV>
__global__ void copy_rows_to_kernel(const float* src, KV* dst, int64_t first, const int64_t* row_on_device,
                                    int64_t width) {
  const float* s = src + int64_t(blockIdx.x) * width;
  KV* d = dst + ((row_on_device ? *row_on_device : first) + int64_t(blockIdx.x)) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) store_kv(d + i, s[i]);
}

}  // namespace

void copy_rows_to(const CopyRowsTo& a, cudaStream_t stream) {
  if (a.count == 0) return;
  with_kv_type(a.dst_bf16, [&](auto element) {
    using KV = decltype(element);
    copy_rows_to_kernel<KV><<<unsigned(a.count), 256, 0, stream>>>(a.src, static_cast<KV*>(a.dst), a.first,
                                                                   a.row_on_device, a.width);
    CUDA_CHECK_LAUNCH();
  });
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
