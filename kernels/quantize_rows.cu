// A block of 256 threads per row; eight lanes per 32-value block, four values a lane, so a block's maximum and sum
// take three shuffles each (a warp per block took five dependent shuffles for each, a thread per block a serial chain
// of 32: both kept the products waiting microseconds). Decode rows are 2,048-6,144 values: one pass or a few, reading
// 8-24 KB.
#include "common.cuh"
#include "quantize_rows.cuh"
#include "row_slice.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256, kLanesPerBlock = 8, kPerLane = kQuantBlock / kLanesPerBlock;
constexpr int64_t kSharedLimit = 48 * 1024;

template <bool kNormed>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const float* __restrict__ x, int64_t k, GemvNorm norm,
                                                                  QuantizedRows out) {
  extern __shared__ float normed[];
  allow_next_kernel();  // the GEMV after it fetches its first weights meanwhile (it waits before it reads x)
  // Launched overlapped, it starts while the kernel that writes x drains (the boundary before it was a whole kernel's
  // launch on the decode step's chain, four times a layer), and waits for it before anything else.
  wait_for_previous_kernel();
  const int64_t row = blockIdx.x;
  const float* in = x + row * k;
  if constexpr (kNormed) {
    RmsNormRow<kThreads, 8> rms;  // the GEMV's folded norm and the plain kernel's code: the same bits
    rms.load(in, k);
    rms.finish(norm.w, norm.type, norm.eps, normed, WeightType::F32);
    __syncthreads();
    in = normed;
  }
  // b0 is the same for a whole warp, so every lane takes part in the shuffles (lanes past the last block with zeros).
  const int sub = threadIdx.x % kLanesPerBlock, lane_block = threadIdx.x % 32 / kLanesPerBlock;
  for (int64_t b0 = threadIdx.x / 32 * (32 / kLanesPerBlock); b0 < out.blocks; b0 += kThreads / kLanesPerBlock) {
    const int64_t b = b0 + lane_block, col = b * kQuantBlock + sub * kPerLane;
    const bool here = b < out.blocks;
    float v[kPerLane];
    int finite = 1;
    float amax = 0;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      v[e] = here && col + e < k ? in[col + e] : 0.0f;
      finite &= isfinite(v[e]) ? 1 : 0;
      amax = fmaxf(amax, fabsf(v[e]));
    }
    for (int offset = kLanesPerBlock / 2; offset > 0; offset /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      finite &= __shfl_xor_sync(0xffffffffu, finite, offset);
    }
    // As the CPU: a block whose 127 / max is past the f32 range quantises to zeros.
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
    if (!here) continue;
    const int64_t block = row * out.blocks + b;
    reinterpret_cast<uint32_t*>(out.values + block * kQuantBlock)[sub] = word;
    if (sub == 0) out.scales[block] = finite ? amax / 127.0f : __int_as_float(0x7fc00000), out.sums[block] = sum;
  }
}

}  // namespace

// The normed row, and 1 KB for the block reduction's own static shared memory.
bool quantize_rows_fits(int64_t k, bool normed) { return !normed || k * int64_t(sizeof(float)) <= kSharedLimit - 1024; }

void quantize_rows(const float* x, int64_t k, const GemvNorm& norm, const QuantizedRows& out, bool overlap,
                   cudaStream_t stream) {
  if (out.rows == 0) return;
  const dim3 grid(unsigned(out.rows)), block(kThreads);
  if (norm.w) launch_kernel(quantize_rows_kernel<true>, grid, block, std::size_t(k) * sizeof(float), stream, overlap, x, k, norm, out);
  else launch_kernel(quantize_rows_kernel<false>, grid, block, 0, stream, overlap, x, k, norm, out);
}

}  // namespace qvl::cuda
