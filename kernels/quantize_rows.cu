// Activations quantised per 32-value block for the integer GEMV. Eight lanes a block, four values a lane, so a
// block's maximum and sum take three shuffles each (a warp a block took five dependent shuffles for each, a thread a
// block a serial chain of 32). A block of 256 threads takes 32 blocks (1,024 values) of one row: a decode row of
// 2,048-6,144 values is 2-6 blocks of the grid, each one pass with its loads issued together. One block a row, looping
// over its chunks with a load per pass (and the normed row written to shared memory first), took 4-8 µs on the H100
// at Nsight's base clocks: on the decode step's chain four times a layer, before each quantised GEMV.
// A normed row: each block sums the whole row's squares (RmsNormRow, the plain RMSNorm's code: its bits) and scales
// its own values by the same w · (x · inverse).
#include "common.cuh"
#include "quantize_rows.cuh"
#include "row_slice.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256, kLanesPerBlock = 8, kPerLane = kQuantBlock / kLanesPerBlock;
constexpr int kBlocksPerChunk = kThreads / kLanesPerBlock;  // 32 blocks, 1,024 values

template <bool kNormed>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const float* __restrict__ x, int64_t k, GemvNorm norm,
                                                                  QuantizedRows out) {
  allow_next_kernel();  // the GEMV after it fetches its first weights meanwhile (it waits before it reads x)
  const int64_t row = blockIdx.y, b = int64_t(blockIdx.x) * kBlocksPerChunk + threadIdx.x / kLanesPerBlock;
  const int sub = threadIdx.x % kLanesPerBlock;
  const int64_t col = b * kQuantBlock + sub * kPerLane;
  float w[kPerLane];  // the norm's weights: nothing writes them, so they come before the wait
  if constexpr (kNormed)
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) w[e] = col + e < k ? load_weight(norm.w, norm.type, col + e) : 0.0f;
  // Launched overlapped, it starts while the kernel that writes x drains, and waits for it before reading x.
  wait_for_previous_kernel();
  const float* in = x + row * k;
  float v[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) v[e] = col + e < k ? in[col + e] : 0.0f;  // zeros past the row's width
  if constexpr (kNormed) {
    RmsNormRow<kThreads, 8> rms;  // its loads issued with this lane's own
    rms.load(in, k);
    const float inverse = rms.inverse(norm.eps);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) v[e] = RowSlice<kThreads, 8>::rms_scaled(w[e], v[e], inverse);
  }
  // The CPU's quantize_activation_row: the block's largest magnitude, scale = max / 127, values x · (127 / max)
  // rounded to nearest even; NaN or an infinity in the block gives a NaN scale and zeros, and a 127 / max past the
  // f32 range zeros. The lanes of a block are 8 consecutive lanes of one warp, so every lane takes part in the
  // shuffles (lanes past the last block with zeros).
  int finite = 1;
  float amax = 0;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    finite &= isfinite(v[e]) ? 1 : 0;
    amax = fmaxf(amax, fabsf(v[e]));
  }
  for (int offset = kLanesPerBlock / 2; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    finite &= __shfl_xor_sync(0xffffffffu, finite, offset);
  }
  const float inv = finite && amax > 0 && isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
  int sum = 0;
  uint32_t word = 0;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int q = finite ? __float2int_rn(v[e] * inv) : 0;
    sum += q;
    word |= uint32_t(uint8_t(int8_t(q))) << (8 * e);
  }
  for (int offset = kLanesPerBlock / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (b >= out.blocks) return;
  const int64_t block = row * out.blocks + b;
  reinterpret_cast<uint32_t*>(out.values + block * kQuantBlock)[sub] = word;
  if (sub == 0) out.scales[block] = finite ? amax / 127.0f : __int_as_float(0x7fc00000), out.sums[block] = sum;
}

}  // namespace

void quantize_rows(const float* x, int64_t k, const GemvNorm& norm, const QuantizedRows& out, bool overlap,
                   cudaStream_t stream) {
  if (out.rows == 0) return;
  const dim3 grid(unsigned((out.blocks + kBlocksPerChunk - 1) / kBlocksPerChunk), unsigned(out.rows)), block(kThreads);
  if (norm.w) launch_kernel(quantize_rows_kernel<true>, grid, block, 0, stream, overlap, x, k, norm, out);
  else launch_kernel(quantize_rows_kernel<false>, grid, block, 0, stream, overlap, x, k, norm, out);
}

}  // namespace qvl::cuda
