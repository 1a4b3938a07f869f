// One warp per block of 32 values: a lane a value, the block's largest magnitude and sum by shuffles. Decode rows
// are 2,048-6,144 values: 64-192 warps, a few microseconds, reading 8-24 KB.
#include "common.cuh"
#include "quantize_rows.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 8;

__global__ void quantize_rows_kernel(const float* __restrict__ x, int64_t k, QuantizedRows out) {
  const int64_t block = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (block >= out.rows * out.blocks) return;
  const int lane = threadIdx.x % 32;
  const int64_t row = block / out.blocks, col = (block % out.blocks) * kQuantBlock + lane;
  const float v = col < k ? x[row * k + col] : 0.0f;
  const bool finite = __all_sync(0xffffffffu, isfinite(v));
  float amax = fabsf(v);
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float inv = finite && amax > 0 ? 127.0f / amax : 0.0f;
  const int q = finite ? __float2int_rn(v * inv) : 0;
  int sum = q;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  out.values[block * kQuantBlock + lane] = int8_t(q);
  if (lane == 0) {
    out.scales[block] = finite ? amax / 127.0f : __int_as_float(0x7fc00000);
    out.sums[block] = sum;
  }
}

}  // namespace

void quantize_rows(const float* x, int64_t k, const QuantizedRows& out, cudaStream_t stream) {
  const int64_t blocks = out.rows * out.blocks;
  if (blocks == 0) return;
  quantize_rows_kernel<<<unsigned((blocks + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(x, k, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
