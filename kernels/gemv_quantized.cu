// One warp per output row (2 or 4 rows a warp where rows are short: rows_per_warp), eight warps a block. Bytes per
// token: N·K (q8) or N·K/2 (q4) plus N·K/group·2 of scales; the quantised activations (M·K bytes) come from L1/L2.
// Lane l takes the row's 32-value blocks l, l + 32, ...: a warp's loads of one step are 1 KB of q8 or 512 B of q4,
// contiguous; kBatch blocks a lane are in flight before the first is used, and the first batch is asked for before x
// (nothing writes weights: with an overlapped launch they come while quantize_rows runs).
#include <cuda_fp16.h>

#include "common.cuh"
#include "gemv_quantized.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32;

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

// R rows a warp (consecutive, of one part; each part's rows a multiple of R): a lane takes the same blocks of each,
// so the x block it loads serves R rows, and a warp has R rows' weights in flight. At K = 2,048 a q4 row is 1 KB,
// two blocks a lane: one row a warp left half the batch's loads unused and each warp 1 KB in flight, against the
// ~50 KB an SM needs in flight to cover DRAM's latency at its share of the bandwidth (the q4 GEMVs ran at about half
// of it). Each row's sums are taken in the same order whatever R is: the same bits.
template <int M, bool kQ4, QuantEpilogue E, int R>
__global__ void __launch_bounds__(kThreads) gemv_quantized_kernel(QuantGemvArgs a) {
  constexpr bool kGated = E == QuantEpilogue::SwiGlu;
  // Blocks a lane a row in flight: R > 1 runs where rows are 2 blocks a lane. A long q4 row (the down projection's
  // 6,144 values: 6 blocks a lane) asks for all of them at once: at 4, 2 KB a warp, ~32 KB an SM (two blocks of the
  // grid an SM) of the ~50 KB that cover DRAM's latency at an SM's share of the bandwidth. (Several rows of x, M > 1,
  // are rare at decode: sm_90's ptxas spills 8 bytes for M = 4 at 8, where at 4 the M = 2 instance spilled 20.)
  constexpr int kBatch = R > 1 ? 2 : kQ4 && !kGated ? 8 : 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t blocks = a.x.blocks;
  // This warp's first row and its part (unrolled: a dynamic index into the parameter struct would copy it to local
  // memory).
  int64_t row = (int64_t(blockIdx.x) * kWarps + warp) * R;
  QuantGemvPart part = a.part[0];
  if (!kGated)
#pragma unroll
    for (int p = 1; p < 3; ++p)
      if (p < a.count && row >= part.w.rows) row -= part.w.rows, part = a.part[p];
  allow_next_kernel();
  if (row >= part.w.rows) return;
  const int64_t bytes0 = part.w.row_bytes, bytes1 = kGated ? a.part[1].w.row_bytes : 0;
  const uint8_t* w0 = part.w.values + row * bytes0;
  const uint8_t* w1 = kGated ? a.part[1].w.values + row * bytes1 : nullptr;
  WeightBlock<kQ4> wa[R][kBatch], wb[R][kBatch];
  const auto load_batch = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t b = base + u * 32;
      if (b < blocks)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          wa[r][u].load(w0 + r * bytes0, b);
          if (kGated) wb[r][u].load(w1 + r * bytes1, b);
        }
    }
  };
  load_batch(lane);
  // The rows' scales asked into L2 as well (nothing writes them; registers would hold them across the wait): read
  // after it, each warp's first scales were a trip past L2 there.
  prefetch_weights_l2(part.w.scales + row * part.w.groups, WeightType::F16, R * part.w.groups, lane);
  if (kGated)
    prefetch_weights_l2(a.part[1].w.scales + row * a.part[1].w.groups, WeightType::F16, R * a.part[1].w.groups,
                        lane);
  wait_for_previous_kernel();
  const int64_t groups0 = part.w.groups, groups1 = kGated ? a.part[1].w.groups : 0;
  const __half* s0 = reinterpret_cast<const __half*>(part.w.scales) + row * groups0;
  const __half* s1 = kGated ? reinterpret_cast<const __half*>(a.part[1].w.scales) + row * groups1 : nullptr;
  const int shift = part.w.group_shift;  // a 64-bit division per block here cost more than the block's products
  float acc0[R][M] = {}, acc1[R][M] = {};
  for (int64_t base = lane; base < blocks; base += 32 * kBatch) {
    if (base != lane) load_batch(base);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t b = base + u * 32;
      if (b >= blocks) break;
      float d0[R], d1[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        d0[r] = __half2float(s0[r * groups0 + (b >> shift)]);
        d1[r] = kGated ? __half2float(s1[r * groups1 + (b >> shift)]) : 0.0f;
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const int64_t xb = m * blocks + b;
        const uint4 x0 = *reinterpret_cast<const uint4*>(a.x.values + xb * kQuantBlock);
        const uint4 x1 = *reinterpret_cast<const uint4*>(a.x.values + xb * kQuantBlock + 16);
        const int xv[8] = {int(x0.x), int(x0.y), int(x0.z), int(x0.w), int(x1.x), int(x1.y), int(x1.z), int(x1.w)};
        const float dx = a.x.scales[xb];
        const int sum = kQ4 ? a.x.sums[xb] : 0;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          acc0[r][m] += d0[r] * dx * float(wa[r][u].dot(xv, sum));
          if (kGated) acc1[r][m] += d1[r] * dx * float(wb[r][u].dot(xv, sum));
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      acc0[r][m] = warp_sum(acc0[r][m]);
      if (kGated) acc1[r][m] = warp_sum(acc1[r][m]);
    }
  const int64_t n = part.w.rows;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (lane != r) continue;  // every lane holds the sums: lane r stores row r's
    const float bias = !kGated && part.bias ? load_weight(part.bias, a.bias_type, row + r) : 0.0f;
    for (int m = 0; m < M; ++m) {
      float* y = part.y + m * n + row + r;
      const float s = acc0[r][m];
      if constexpr (kGated) *y = s / (1.0f + expf(-s)) * acc1[r][m];
      else if constexpr (E == QuantEpilogue::Accumulate) *y += s + bias;  // as the unfused add: y + (x·wᵀ + b)
      else *y = s + bias;
    }
  }
}

// Rows a warp: 4 KB of weights in flight a warp where a row is at most two blocks a lane (K <= 2,048): q4 4 rows
// (2 gated: gate and up), q8 2 (1 gated); 1 for longer rows (their batches fill on their own) and for M > 1 (the
// accumulators). Each part's rows must be a multiple of it.
template <bool kQ4, QuantEpilogue E> constexpr int kMostRowsAWarp = (kQ4 ? 4 : 2) / (E == QuantEpilogue::SwiGlu ? 2 : 1);
template <bool kQ4, QuantEpilogue E> int rows_per_warp(const QuantGemvArgs& a) {
  if (a.x.blocks > 64) return 1;
  int r = kMostRowsAWarp<kQ4, E>;
  for (int p = 0; p < (E == QuantEpilogue::SwiGlu ? 1 : a.count); ++p)
    while (r > 1 && a.part[p].w.rows % r != 0) r /= 2;
  return r;
}

template <int M, bool kQ4, QuantEpilogue E, int R>
void launch_rows_a_warp(const QuantGemvArgs& a, int64_t rows, bool overlap, cudaStream_t stream) {
  const dim3 grid{unsigned((rows + kWarps * R - 1) / (kWarps * R))}, block{unsigned(kThreads)};
  launch_kernel(gemv_quantized_kernel<M, kQ4, E, R>, grid, block, 0, stream, overlap, a);
}

template <int M, bool kQ4, QuantEpilogue E>
void launch_typed(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  int64_t rows = a.part[0].w.rows;
  if (E != QuantEpilogue::SwiGlu)
    for (int p = 1; p < a.count; ++p) rows += a.part[p].w.rows;
  if constexpr (M == 1) {
    const int r = rows_per_warp<kQ4, E>(a);
    if constexpr (kMostRowsAWarp<kQ4, E> >= 4)
      if (r == 4) return launch_rows_a_warp<M, kQ4, E, 4>(a, rows, overlap, stream);
    if constexpr (kMostRowsAWarp<kQ4, E> >= 2)
      if (r == 2) return launch_rows_a_warp<M, kQ4, E, 2>(a, rows, overlap, stream);
  }
  launch_rows_a_warp<M, kQ4, E, 1>(a, rows, overlap, stream);
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
