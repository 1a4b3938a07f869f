// One warp per output row, four warps a block; lane l takes the row's blocks l, l + 32, ... (one 32-value block is
// 32 bytes of q8 or 16 of q4: a warp's loads of one step are 1 KB or 512 B, contiguous). Bytes per token: N·K·(1 or
// 0.5) + N·K/group·2 for the scales; the activations (M·K bytes) come from L1/L2.
#include <cuda_fp16.h>

#include "common.cuh"
#include "gemv_quantized.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 4;

template <int M, bool kQ4>
__global__ void __launch_bounds__(kWarps * 32) gemv_quantized_kernel(QuantGemvArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= a.w.rows) return;
  const uint8_t* w = a.w.values + row * a.w.row_bytes;
  const __half* scales = reinterpret_cast<const __half*>(a.w.scales) + row * a.w.groups;
  const int64_t blocks = a.x.blocks;
  float acc[M] = {};
  for (int64_t b = lane; b < blocks; b += 32) {
    int wv[8];  // the block's 32 values: q8 as 8 words of 4 signed bytes; q4 as 4 words of 8 nibbles (words 0-3)
    if (kQ4) {
      const uint4 v = *reinterpret_cast<const uint4*>(w + b * kQuantBlock / 2);
      wv[0] = int(v.x), wv[1] = int(v.y), wv[2] = int(v.z), wv[3] = int(v.w);
    } else {
      const uint4 v0 = *reinterpret_cast<const uint4*>(w + b * kQuantBlock);
      const uint4 v1 = *reinterpret_cast<const uint4*>(w + b * kQuantBlock + 16);
      wv[0] = int(v0.x), wv[1] = int(v0.y), wv[2] = int(v0.z), wv[3] = int(v0.w);
      wv[4] = int(v1.x), wv[5] = int(v1.y), wv[6] = int(v1.z), wv[7] = int(v1.w);
    }
    const float dw = __half2float(scales[b / a.w.blocks_per_group]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int64_t xb = m * blocks + b;
      const uint4 x0 = *reinterpret_cast<const uint4*>(a.x.values + xb * kQuantBlock);
      const uint4 x1 = *reinterpret_cast<const uint4*>(a.x.values + xb * kQuantBlock + 16);
      const int xv[8] = {int(x0.x), int(x0.y), int(x0.z), int(x0.w), int(x1.x), int(x1.y), int(x1.z), int(x1.w)};
      int dot = 0;
      if (kQ4) {
        // Low nibbles of word i are values 4i..4i+3 (x word i), high nibbles 16+4i.. (x word 4 + i); stored + 8.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          dot = __dp4a(wv[i] & 0x0f0f0f0f, xv[i], dot);
          dot = __dp4a((wv[i] >> 4) & 0x0f0f0f0f, xv[4 + i], dot);
        }
        dot -= 8 * a.x.sums[xb];
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = __dp4a(wv[i], xv[i], dot);
      }
      acc[m] += dw * a.x.scales[xb] * float(dot);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
    for (int offset = 16; offset > 0; offset /= 2) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
  if (lane != 0) return;
  const float bias = a.bias ? load_weight(a.bias, a.bias_type, row) : 0.0f;
  for (int m = 0; m < M; ++m) {
    float* y = a.y + m * a.w.rows + row;
    *y = a.accumulate ? *y + (acc[m] + bias) : acc[m] + bias;
  }
}

template <int M> void launch(const QuantGemvArgs& a, cudaStream_t stream) {
  const unsigned grid = unsigned((a.w.rows + kWarps - 1) / kWarps);
  if (a.w.format == QuantFormat::Q4) gemv_quantized_kernel<M, true><<<grid, kWarps * 32, 0, stream>>>(a);
  else gemv_quantized_kernel<M, false><<<grid, kWarps * 32, 0, stream>>>(a);
}

}  // namespace

void gemv_quantized(const QuantGemvArgs& a, cudaStream_t stream) {
  if (a.x.rows == 0 || a.w.rows == 0) return;
  switch (a.x.rows) {
    case 1: launch<1>(a, stream); break;
    case 2: launch<2>(a, stream); break;
    case 3: launch<3>(a, stream); break;
    case 4: launch<4>(a, stream); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "gemv_quantized: more than 4 rows", __FILE__, __LINE__);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
