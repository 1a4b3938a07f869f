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

// Each product and sum rounded on its own, in the CPU reference's order (no contraction into FMAs): the same bits.
__global__ void add_blended_kernel(BlendRows a) {
  const int32_t* r = a.rows + 4 * int64_t(blockIdx.x);
  const float* w = a.weights + 4 * int64_t(blockIdx.x);
  float* x = a.x + int64_t(blockIdx.x) * a.width;
  for (int64_t i = threadIdx.x; i < a.width; i += blockDim.x) {
    const auto tap = [&](int j) { return __fmul_rn(load_weight(a.table, a.table_type, r[j] * a.width + i), w[j]); };
    const float blended = __fadd_rn(__fadd_rn(__fadd_rn(tap(0), tap(1)), tap(2)), tap(3));
    x[i] = __fadd_rn(x[i], blended);
  }
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

void add_blended_rows(const BlendRows& a, cudaStream_t stream) {
  if (a.count == 0) return;
  add_blended_kernel<<<unsigned(a.count), 256, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

void scatter_rows(float* x, const float* src, const int64_t* rows, int64_t count, int64_t width, bool accumulate,
                  cudaStream_t stream) {
  if (count == 0) return;
  scatter_kernel<<<unsigned(count), 256, 0, stream>>>(x, src, rows, width, accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
