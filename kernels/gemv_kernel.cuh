#pragma once
// The decode GEMV kernel, shared by the plain projection (gemv.cu), the fused q+k+v projection (gemv_qkv.cu) and the
// fused SwiGLU projection (gemv_swiglu.cu): M <= 4 activation rows, memory-bound (N·K·sizeof(w) bytes for 2·M·N·K
// FLOPs), so it aims at the DRAM roofline. One warp per output row (two or four for few, long rows), 8 warps a
// block; a lane issues all the 16-byte weight loads of a batch (8 vectors of each matrix) before it uses the first,
// and reads the activations as float4 (scalar loads of x were 8 L1 wavefronts per 16 weight bytes: the kernel
// topped out near 2 TB/s on L1 throughput, even on the 622 MB output head).
// - Gated: a warp streams the same row of gate and up; silu(gate) ⊙ up is applied before anything leaves registers.
// - Plain: the rows may come from up to three matrices of the same K and type, each with its own output (q, k and v
//   in one launch: a small matrix alone does not fill the GPU long enough to amortise the launch and the ramp-up);
//   the result is stored, or added to y (the residual stream: the add that would follow as a kernel of its own).
// - Normed: the input RMSNorm folded in. Each block normalises x into shared memory with the plain RMSNorm's own
//   code (RmsNormRow: the same bits). Launched the plain way, it asks for x first, then for its first batch of
//   weights, so the norm's trip to L2 overlaps the weights' trip to DRAM (issued after the weights, the x loads
//   queued behind them: the folded q+k+v GEMV took 5 µs more than the plain one). M·K floats of shared memory (48 KB
//   at most).
// - Overlapped (programmatic dependent launch, common.cuh): the first batch of weights is asked for while the
//   previous kernel drains; x only once it has finished.
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "gemv.cuh"
#include "row_slice.cuh"
#include "weights.cuh"

namespace qvl::cuda {

constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int64_t kGemvNormBytes = 48 * 1024;  // shared memory for the normed x without an opt-in, on every GPU

enum class GemvEpilogue { Store, Accumulate, SwiGlu };  // y = x·wᵀ + b; y += x·wᵀ + b; y = silu(x·gateᵀ) ⊙ x·upᵀ

// One matrix of a launch: n rows of w (and bias, optional) into y [M, n].
struct GemvPart {
  const void* w = nullptr;
  const void* bias = nullptr;
  float* y = nullptr;
  int64_t n = 0;
};
struct GemvParts {
  static constexpr int kMax = 3;
  GemvPart part[kMax];
  int count = 0;
  __host__ __device__ int64_t rows() const {
    int64_t n = 0;
    for (int p = 0; p < count; ++p) n += part[p].n;
    return n;
  }
};

// Warps a row of a plain projection: for few rows (up to 4,096), enough that a lane's share of its row is one batch
// where four warps can make it so: 1 up to a batch a row, 2 up to two, else 4 (the 2B model's down projection, 2048
// rows of 6144: one warp a row left half the warp slots empty and each warp three batches deep; two took two trips to
// DRAM, 8 vectors and 4, with the sums between); 1 for many rows. The warps of a row interleave by vector.
inline int gemv_warps_per_row(int64_t rows, int64_t k, int vec) {
  const int64_t batch = 32 * 8 * int64_t(vec);  // a warp's elements of a row in one batch (M = 1)
  if (rows > 4096 || k <= batch) return 1;
  return k <= 2 * batch ? 2 : 4;
}

// Blocks an SM the kernel is compiled for: 4 at 64 registers a thread (32 warps), where a lane holds one batch of 8
// vectors; 2 for the gated kernel, whose lane holds 8 vectors of each matrix (~95 registers; at 3 blocks, 85
// registers, it spilled 308 bytes). With 4 vectors of each a lane (4 blocks) a 2,048-wide row took two trips to DRAM
// with the sums between them; in one trip the 2B's gate/up went 24.2 -> 22.2 us a layer in the decode graph (block
// timeline, H100, 4,096 tokens of context) and its decode gained 1-2% (docs/performance.md).
template <GemvEpilogue E>
constexpr int gemv_blocks_per_sm() {
  return E == GemvEpilogue::SwiGlu ? 2 : 4;
}

template <typename W, int M, GemvEpilogue E, bool kNormed, int kSplit>
__global__ void __launch_bounds__(kGemvThreads, gemv_blocks_per_sm<E>())
    gemv_kernel(const float* __restrict__ x, GemvParts parts, const W* __restrict__ up, WeightType bias_type, int64_t k,
                GemvNorm norm, bool overlapped) {
  constexpr bool kGated = E == GemvEpilogue::SwiGlu;
  // 8 loads of 16 bytes a matrix in flight per lane at M = 1; more rows of x take more registers a load.
  constexpr int kVec = Vec16<W>::kCount, kBatch = 8 / M;
  extern __shared__ float4 normed_x[];
  static_assert(kSplit == 1 || !kGated, "split rows are plain projections'");
  __shared__ float split_sums[kGemvWarps][M];  // split rows: each warp's sums, added up by the row's first warp
  const int warp = threadIdx.x / 32, slice = warp % kSplit;  // which of its row's kSplit warps
  int64_t row = int64_t(blockIdx.x) * (kGemvWarps / kSplit) + warp / kSplit;
  // The part this row belongs to (unrolled: a dynamic index into the parameter struct would copy it to local memory).
  GemvPart part = parts.part[0];
  for (int p = 1; p < GemvParts::kMax; ++p)
    if (p < parts.count && row >= part.n) row -= part.n, part = parts.part[p];
  const bool active = row < part.n;  // a warp past the last row still helps with the norm
  const int lane = threadIdx.x % 32;
  const W* r0 = static_cast<const W*>(part.w) + (active ? row : 0) * k;
  const W* r1 = kGated ? up + (active ? row : 0) * k : nullptr;
  // Offsets along the row in int (a row is far below 2^31 elements): fewer registers than 64-bit ones.
  const int kk = int(k), stride = 32 * kVec * kSplit;  // between a lane's vectors
  const int first = (lane + 32 * slice) * kVec, step = stride * kBatch;
  uint4 wa[kBatch], wb[kBatch];
  const auto load_batch = [&](int base) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * stride;
      if (active && i < kk) {
        wa[u] = *reinterpret_cast<const uint4*>(r0 + i);
        if constexpr (kGated) wb[u] = *reinterpret_cast<const uint4*>(r1 + i);
      }
    }
  };
  const float* xs = x;
  allow_next_kernel();
  if constexpr (kNormed) {
    // Without an overlapped launch, the first row of x is asked for before the weights, so that it does not queue
    // behind them; with one, the weights come first, while the previous kernel drains.
    float* out = reinterpret_cast<float*>(normed_x);
    RmsNormRow<kGemvThreads, 8> normed;
    // The norm's weights asked into L2 first: after the block sum they were a trip past L2 after the matrix's first
    // batch (registers holding them across the wait instead spilled the q+k+v GEMV, 12.7 -> 14.3 µs). Every block
    // reads the same few KB, so the first two ask for them: with every block asking, the q+k+v GEMV took 12.5-12.8 ->
    // 13.2-13.4 µs alone (512 blocks' requests for the same 32 lines); with two, 12.6-12.8, and gate/up 21.8-22.1 ->
    // 20.6-21.1 (H200, 2B, one call; decode +1% at 4,096 tokens of context, level at 256: docs/performance.md).
    if (blockIdx.x < 2 && warp == 0) prefetch_weights_l2(norm.w, norm.type, k, lane);
    if (overlapped) load_batch(first);
    wait_for_previous_kernel();
    normed.load(x, k);
    if (!overlapped) load_batch(first);
    for (int m = 0; m < M; ++m) {
      if (m > 0) normed.load(x + m * k, k);
      normed.finish(norm.w, norm.type, norm.eps, out + m * k, WeightType::F32);
    }
    __syncthreads();
    xs = out;
  } else {
    load_batch(first);  // weights: nothing writes them, so they may come while the previous kernel drains
    wait_for_previous_kernel();
  }
  if (kSplit == 1 && !active) return;  // a split row's warps meet at a barrier below
  float acc0[M] = {}, acc1[M] = {};
  for (int base = first; active && base < kk; base += step) {
    if (base != first) load_batch(base);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * stride;
      if (i >= kk) break;
      float a[kVec], b[kVec];
      Vec16<W>::widen(wa[u], a);
      if constexpr (kGated) Vec16<W>::widen(wb[u], b);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float4* x4 = reinterpret_cast<const float4*>(xs + m * k + i);
#pragma unroll
        for (int j = 0; j < kVec / 4; ++j) {
          const float4 xv = x4[j];
          const float xj[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc0[m] += xj[e] * a[4 * j + e];
            if constexpr (kGated) acc1[m] += xj[e] * b[4 * j + e];
          }
        }
      }
    }
  }
  float sum0[M], sum1[M];
  for (int m = 0; m < M; ++m) sum0[m] = warp_sum(acc0[m]), sum1[m] = kGated ? warp_sum(acc1[m]) : 0.0f;
  if constexpr (kSplit > 1) {  // the row's other warps hand their sums to its first, added in the warps' order
    if (lane == 0)
      for (int m = 0; m < M; ++m) split_sums[warp][m] = sum0[m];
    __syncthreads();
    if (slice != 0) return;
    for (int h = 1; h < kSplit; ++h)
      for (int m = 0; m < M; ++m) sum0[m] += split_sums[warp + h][m];
  }
  if (!active || lane != 0) return;
  const int64_t n = part.n;
  float* __restrict__ y = part.y;
  const float b0 = !kGated && part.bias ? load_weight(part.bias, bias_type, row) : 0.0f;
  for (int m = 0; m < M; ++m) {
    const float s = sum0[m];
    if constexpr (kGated) y[m * n + row] = s / (1.0f + expf(-s)) * sum1[m];
    else if constexpr (E == GemvEpilogue::Accumulate) y[m * n + row] += s + b0;  // as the unfused add: y + (x·wᵀ + b)
    else y[m * n + row] = s + b0;
  }
}

// Whether the kernel can take this shape: M <= 4, K a multiple of the 16-byte vector, 16-byte aligned rows, and
// (normed) the normed x in 48 KB of shared memory.
inline bool gemv_fits(WeightType w_type, int64_t m, int64_t k, const void* x, const void* w0, const void* w1,
                      bool normed = false) {
  const int64_t vec = 16 / weight_type_bytes(w_type);  // elements a 16-byte vector
  if (k >= (int64_t(1) << 30)) return false;  // offsets along a row are int
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return m <= 4 && k % vec == 0 && aligned(x) && aligned(w0) && (!w1 || aligned(w1)) &&
         (!normed || m * k * int64_t(sizeof(float)) <= kGemvNormBytes);
}

template <typename W, GemvEpilogue E, bool kNormed, int kSplit>
void launch_gemv_split(const float* x, const GemvParts& parts, const W* up, WeightType bias_type, int64_t m, int64_t k,
                       const GemvNorm& norm, bool overlap, cudaStream_t stream) {
  const dim3 grid(unsigned((parts.rows() + kGemvWarps / kSplit - 1) / (kGemvWarps / kSplit))), block(kGemvThreads);
  const std::size_t shared = kNormed ? std::size_t(m * k) * sizeof(float) : 0;
  const auto kernel = m == 1 ? gemv_kernel<W, 1, E, kNormed, kSplit>
                      : m == 2 ? gemv_kernel<W, 2, E, kNormed, kSplit>
                      : m == 3 ? gemv_kernel<W, 3, E, kNormed, kSplit>
                               : gemv_kernel<W, 4, E, kNormed, kSplit>;
  launch_kernel(kernel, grid, block, shared, stream, overlap, x, parts, up, bias_type, k, norm, overlap);
}

template <typename W, GemvEpilogue E, bool kNormed>
void launch_gemv_typed(const float* x, const GemvParts& parts, const void* up, WeightType bias_type, int64_t m,
                       int64_t k, const GemvNorm& norm, bool overlap, cudaStream_t stream) {
  const auto* b = static_cast<const W*>(up);
  constexpr bool kPlain = !kNormed && E != GemvEpilogue::SwiGlu;
  if constexpr (kPlain) {
    const int split = gemv_warps_per_row(parts.rows(), k, Vec16<W>::kCount);
    if (split == 4) return launch_gemv_split<W, E, kNormed, 4>(x, parts, b, bias_type, m, k, norm, overlap, stream);
    if (split == 2) return launch_gemv_split<W, E, kNormed, 2>(x, parts, b, bias_type, m, k, norm, overlap, stream);
  }
  launch_gemv_split<W, E, kNormed, 1>(x, parts, b, bias_type, m, k, norm, overlap, stream);
}

template <GemvEpilogue E, bool kNormed>
void launch_gemv_normed(WeightType w_type, const float* x, const GemvParts& parts, const void* up, WeightType bias_type,
                        int64_t m, int64_t k, const GemvNorm& norm, bool overlap, cudaStream_t stream) {
  if (m == 0 || parts.rows() == 0) return;
  if (w_type == WeightType::BF16)
    launch_gemv_typed<uint16_t, E, kNormed>(x, parts, up, bias_type, m, k, norm, overlap, stream);
  else if (w_type == WeightType::F16)
    launch_gemv_typed<__half, E, kNormed>(x, parts, up, bias_type, m, k, norm, overlap, stream);
  else launch_gemv_typed<float, E, kNormed>(x, parts, up, bias_type, m, k, norm, overlap, stream);
}

// Call after gemv_fits (with normed = norm.w != nullptr). up (gated only, one part): the up matrix, same type and
// shape as the part's.
template <GemvEpilogue E>
void launch_gemv(WeightType w_type, const float* x, const GemvParts& parts, const void* up, WeightType bias_type,
                 int64_t m, int64_t k, const GemvNorm& norm, bool overlap, cudaStream_t stream) {
  if (norm.w) launch_gemv_normed<E, true>(w_type, x, parts, up, bias_type, m, k, norm, overlap, stream);
  else launch_gemv_normed<E, false>(w_type, x, parts, up, bias_type, m, k, norm, overlap, stream);
}

}  // namespace qvl::cuda
