#include <cuda_fp16.h>

#include <algorithm>

#include "common.cuh"
#include "dequantize.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

// Value i of a row: its integer times its group's scale.
__device__ __forceinline__ float dequantized(const QuantMatrix& w, int64_t row, int64_t i) {
  const uint8_t* values = w.values + row * w.row_bytes;
  const int block = int(i / kQuantBlock), j = int(i % kQuantBlock);  // a row is far below 2^31 values
  const float d = __half2float(reinterpret_cast<const __half*>(w.scales)[row * w.groups + (block >> w.group_shift)]);
  if (w.format == QuantFormat::Q8) return d * float(int8_t(values[i]));
  const uint8_t byte = values[block * kQuantBlock / 2 + j % (kQuantBlock / 2)];
  return d * float(int(j < kQuantBlock / 2 ? byte & 15 : byte >> 4) - 8);
}

// A warp per 32-value block, a lane per value (any shape): the block's bytes read once, its outputs written
// contiguously, one index split per block. Measured 0.4-0.56 TB/s on the H100 (perf mode).
__global__ void dequantize_kernel(QuantMatrix w, void* out, WeightType type) {
  const int lane = threadIdx.x % 32;
  const int64_t blocks = (w.cols + kQuantBlock - 1) / kQuantBlock, total = w.rows * blocks;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t t = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; t < total; t += warps) {
    const int64_t row = t / blocks, col = (t - row * blocks) * kQuantBlock + lane;
    if (col < w.cols) store_activation(out, type, row * w.cols + col, dequantized(w, row, col));
  }
}

// Eight values a thread, where rows hold whole eights and the matrix a 32-bit index: 8 bytes in (q8: eight values;
// q4: the low or the high nibbles of 8 bytes of a block, values j..j+7 or j+16..j+23) and one 16-byte store out (two
// for f32), each value d · integer rounded as store_activation rounds: the same values as the warp-a-block kernel
// above, which spent a 64-bit division, a byte load and a 2-byte store on every value (0.4-0.56 TB/s, and 16 ms of a
// q4 prefill of 512 tokens where bf16 took 7).
template <WeightType kOut> __global__ void dequantize_by_eight_kernel(QuantMatrix w, void* out) {
  const int per_row = int(w.cols / 8), total = int(w.rows) * per_row;
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += int(gridDim.x * blockDim.x)) {
    const int row = i / per_row, first = (i - row * per_row) * 8;
    const int block = first / kQuantBlock, j = first % kQuantBlock;
    const float d = __half2float(reinterpret_cast<const __half*>(w.scales)[int64_t(row) * w.groups + (block >> w.group_shift)]);
    const uint8_t* values = w.values + int64_t(row) * w.row_bytes;
    float x[8];
    if (w.format == QuantFormat::Q8) {
      const uint2 raw = *reinterpret_cast<const uint2*>(values + first);
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = d * float(int8_t(((e < 4 ? raw.x : raw.y) >> (8 * (e % 4))) & 0xff));
    } else {
      const uint2 raw = *reinterpret_cast<const uint2*>(values + block * (kQuantBlock / 2) + j % (kQuantBlock / 2));
      const int shift = j < kQuantBlock / 2 ? 0 : 4;
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = d * float(int(((e < 4 ? raw.x : raw.y) >> (8 * (e % 4) + shift)) & 15) - 8);
    }
    const int64_t at = int64_t(row) * w.cols + first;
    if constexpr (kOut == WeightType::F32) {
      reinterpret_cast<float4*>(static_cast<float*>(out) + at)[0] = make_float4(x[0], x[1], x[2], x[3]);
      reinterpret_cast<float4*>(static_cast<float*>(out) + at)[1] = make_float4(x[4], x[5], x[6], x[7]);
    } else {
      uint16_t h[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        h[e] = kOut == WeightType::BF16 ? round_to_bf16(x[e]) : __half_as_ushort(__float2half_rn(x[e]));
      uint4 packed;
      packed.x = h[0] | uint32_t(h[1]) << 16, packed.y = h[2] | uint32_t(h[3]) << 16;
      packed.z = h[4] | uint32_t(h[5]) << 16, packed.w = h[6] | uint32_t(h[7]) << 16;
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + at) = packed;
    }
  }
}

__global__ void gather_kernel(QuantMatrix w, const int64_t* ids, float* y) {
  const int64_t row = ids[blockIdx.x];
  for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x) y[int64_t(blockIdx.x) * w.cols + i] = dequantized(w, row, i);
}

}  // namespace

void dequantize(const QuantMatrix& w, void* out, WeightType type, cudaStream_t stream) {
  const int64_t total = w.rows * w.cols;
  if (total == 0) return;
  if (w.cols % 8 == 0 && total < (int64_t(1) << 31) && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(w.values) % 8 == 0 && w.row_bytes % 8 == 0) {
    const auto blocks = unsigned(std::min<int64_t>((total / 8 + 255) / 256, 65536));
    if (type == WeightType::BF16) dequantize_by_eight_kernel<WeightType::BF16><<<blocks, 256, 0, stream>>>(w, out);
    else if (type == WeightType::F16) dequantize_by_eight_kernel<WeightType::F16><<<blocks, 256, 0, stream>>>(w, out);
    else dequantize_by_eight_kernel<WeightType::F32><<<blocks, 256, 0, stream>>>(w, out);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t warps = w.rows * ((w.cols + kQuantBlock - 1) / kQuantBlock);
  dequantize_kernel<<<unsigned(std::min<int64_t>((warps + 7) / 8, 65536)), 256, 0, stream>>>(w, out, type);
  CUDA_CHECK_LAUNCH();
}

void gather_quantized_rows(const QuantMatrix& w, const int64_t* ids, float* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  gather_kernel<<<unsigned(count), 256, 0, stream>>>(w, ids, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
