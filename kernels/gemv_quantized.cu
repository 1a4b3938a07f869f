// One warp per output row, eight warps a block. Bytes per token: N·K (q8) or N·K/2 (q4) plus N·K/group·2 of scales;
// the quantised activations (M·K bytes) come from L1/L2. Lane l takes the row's 32-value blocks l, l + 32, ...: a
// warp's loads of one step are 1 KB of q8 or 512 B of q4, contiguous; kBatch blocks a lane are in flight before the
// first is used, and the first batch is asked for before x (nothing writes weights: with an overlapped launch they
// come while quantize_rows runs).
#include <cuda_fp16.h>

#include "common.cuh"
#include "gemv_quantized.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32, kBatch = 4;

// One 32-value block of a weight row, raw: q8 fills 8 words, q4 4 (8 nibbles each).
template <bool kQ4> struct WeightBlock {
  uint4 lo, hi;
  __device__ __forceinline__ void load(const uint8_t* row, int64_t b) {
    if constexpr (kQ4) {
      lo = *reinterpret_cast<const uint4*>(row + b * kQuantBlock / 2);
    } else {
      lo = *reinterpret_cast<const uint4*>(row + b * kQuantBlock);
      hi = *reinterpret_cast<const uint4*>(row + b * kQuantBlock + 16);
    }
  }
  // The integer dot with a quantised activation block (xv: its 8 words, sum: its values' sum).
  __device__ __forceinline__ int dot(const int xv[8], int sum) const {
    const int w[8] = {int(lo.x), int(lo.y), int(lo.z), int(lo.w), int(hi.x), int(hi.y), int(hi.z), int(hi.w)};
    int d = 0;
    if constexpr (kQ4) {
      // Low nibbles of word i are values 4i..4i+3 (x word i), high nibbles 16+4i.. (x word 4 + i); stored + 8.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        d = __dp4a(w[i] & 0x0f0f0f0f, xv[i], d);
        d = __dp4a((w[i] >> 4) & 0x0f0f0f0f, xv[4 + i], d);
      }
      return d - 8 * sum;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) d = __dp4a(w[i], xv[i], d);
      return d;
    }
  }
};

template <int M, bool kQ4, QuantEpilogue E>
__global__ void __launch_bounds__(kThreads) gemv_quantized_kernel(QuantGemvArgs a) {
  constexpr bool kGated = E == QuantEpilogue::SwiGlu;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t blocks = a.x.blocks;
  // This warp's row and its part (unrolled: a dynamic index into the parameter struct would copy it to local memory).
  int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  QuantGemvPart part = a.part[0];
  if (!kGated)
#pragma unroll
    for (int p = 1; p < 3; ++p)
      if (p < a.count && row >= part.w.rows) row -= part.w.rows, part = a.part[p];
  allow_next_kernel();
  if (row >= part.w.rows) return;
  const uint8_t* w0 = part.w.values + row * part.w.row_bytes;
  const uint8_t* w1 = kGated ? a.part[1].w.values + row * a.part[1].w.row_bytes : nullptr;
  WeightBlock<kQ4> wa[kBatch], wb[kBatch];
  const auto load_batch = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t b = base + u * 32;
      if (b < blocks) {
        wa[u].load(w0, b);
        if (kGated) wb[u].load(w1, b);
      }
    }
  };
  load_batch(lane);
  wait_for_previous_kernel();
  const __half* s0 = reinterpret_cast<const __half*>(part.w.scales) + row * part.w.groups;
  const __half* s1 = kGated ? reinterpret_cast<const __half*>(a.part[1].w.scales) + row * a.part[1].w.groups : nullptr;
  const int shift = part.w.group_shift;  // a 64-bit division per block here cost more than the block's products
  float acc0[M] = {}, acc1[M] = {};
  for (int64_t base = lane; base < blocks; base += 32 * kBatch) {
    if (base != lane) load_batch(base);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t b = base + u * 32;
      if (b >= blocks) break;
      const float d0 = __half2float(s0[b >> shift]), d1 = kGated ? __half2float(s1[b >> shift]) : 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const int64_t xb = m * blocks + b;
        const uint4 x0 = *reinterpret_cast<const uint4*>(a.x.values + xb * kQuantBlock);
        const uint4 x1 = *reinterpret_cast<const uint4*>(a.x.values + xb * kQuantBlock + 16);
        const int xv[8] = {int(x0.x), int(x0.y), int(x0.z), int(x0.w), int(x1.x), int(x1.y), int(x1.z), int(x1.w)};
        const float dx = a.x.scales[xb];
        const int sum = kQ4 ? a.x.sums[xb] : 0;
        acc0[m] += d0 * dx * float(wa[u].dot(xv, sum));
        if (kGated) acc1[m] += d1 * dx * float(wb[u].dot(xv, sum));
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    acc0[m] = warp_sum(acc0[m]);
    if (kGated) acc1[m] = warp_sum(acc1[m]);
  }
  if (lane != 0) return;
  const float bias = !kGated && part.bias ? load_weight(part.bias, a.bias_type, row) : 0.0f;
  const int64_t n = part.w.rows;
  for (int m = 0; m < M; ++m) {
    float* y = part.y + m * n + row;
    const float s = acc0[m];
    if constexpr (kGated) *y = s / (1.0f + expf(-s)) * acc1[m];
    else if constexpr (E == QuantEpilogue::Accumulate) *y += s + bias;  // as the unfused add: y + (x·wᵀ + b)
    else *y = s + bias;
  }
}

template <int M, bool kQ4, QuantEpilogue E>
void launch_typed(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  int64_t rows = a.part[0].w.rows;
  if (E != QuantEpilogue::SwiGlu)
    for (int p = 1; p < a.count; ++p) rows += a.part[p].w.rows;
  const dim3 grid{unsigned((rows + kWarps - 1) / kWarps)}, block{unsigned(kThreads)};
  launch_kernel(gemv_quantized_kernel<M, kQ4, E>, grid, block, 0, stream, overlap, a);
}

template <int M, QuantEpilogue E> void launch_rows(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  if (a.part[0].w.format == QuantFormat::Q4) launch_typed<M, true, E>(a, overlap, stream);
  else launch_typed<M, false, E>(a, overlap, stream);
}

template <QuantEpilogue E> void launch(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  switch (a.x.rows) {
    case 1: return launch_rows<1, E>(a, overlap, stream);
    case 2: return launch_rows<2, E>(a, overlap, stream);
    case 3: return launch_rows<3, E>(a, overlap, stream);
    default: return launch_rows<4, E>(a, overlap, stream);
  }
}

}  // namespace

void gemv_quantized(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  if (a.x.rows == 0 || a.part[0].w.rows == 0) return;
  if (a.x.rows > 4) throw_cuda_error(cudaErrorInvalidValue, "gemv_quantized: more than 4 rows", __FILE__, __LINE__);
  switch (a.epilogue) {
    case QuantEpilogue::Store: launch<QuantEpilogue::Store>(a, overlap, stream); break;
    case QuantEpilogue::Accumulate: launch<QuantEpilogue::Accumulate>(a, overlap, stream); break;
    case QuantEpilogue::SwiGlu: launch<QuantEpilogue::SwiGlu>(a, overlap, stream); break;
  }
}

}  // namespace qvl::cuda
