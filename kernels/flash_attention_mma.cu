// Flash attention on tensor cores (FlashAttention-2's layout, written with mma.sync so it runs on SM80 and SM90).
// Why: the CUDA-core kernel (flash_attention.cu) runs at 8-12 TFLOP/s on an H100 and was 27% of a 512-token prefill
// and 43% of a 448x448 vision encode; an H100's f16 tensor cores (mma.sync m16n8k16, f32 accumulate) peak at ~990
// dense TFLOP/s against ~67 for f32 on CUDA cores.
//
// A block of 8 warps takes 128 queries of one head; for small causal grids, 64 queries with their key tiles split
// between two groups of 4 warps (FlashShape, launch). Each warp owns 16 query rows and keeps them in registers as A
// fragments (q·scale·log2 e, f16) for the whole key loop. Per tile of 64 keys the block (each group of it) stages K
// and V in shared memory as f16 ([key][D + 8]: the 8-half pad puts the 8 rows a fragment load touches in different
// banks); each warp computes its 16 x 64 scores with mma (B = K rows, two steps' fragments an ldmatrix), masks them,
// updates the running row max and sum in registers (online softmax: the score fragment's layout is the A fragment's,
// so p never goes through shared memory), and accumulates p·V with mma, V's B fragments loaded transposed by
// ldmatrix. Each K/V element is read from global memory once per block of queries (128 or 64); the block skips
// tiles none of its queries sees (causal tail, other images' segments), and a warp skips the math of tiles none of
// its rows sees.
// Registers at D = 128: 32 for q, 32 for the scores, 64 for the output.
//
// The tiles are pipelined: the next tile's keys and values are copied as stored (f32 or bf16) into a raw buffer with
// cp.async while the warps compute on the current one, then widened into the f16 tiles between two barriers. Before,
// each tile was loaded, converted and stored by every thread with nothing to overlap the loads: on an H200, 512
// causal queries took 51 us a layer, ~6 us a tile against ~1 us of tensor-core work. Shared memory (dynamic):
// f16 tiles 2 x 64 x (D + 8) x 2 B, raw 2 x 64 x D x (2 or 4) B: 66 KB at D = 128 from a bf16 cache.
// Keys and values stored in f16 (the vision tower's: its bias + RoPE kernel rounds them as the widening did) are
// copied straight into f16 tiles of two stages, the next tile's into one while the warps compute on the other: half
// the bytes of f32 a tile, no widening pass and one barrier a tile instead of two, the same bits.
//
// Instructions a tile: the vision launch (784 patches, d = 64) issued 14.8 M warp instructions, ~1,270 a warp a tile
// against 64 mma and 32 ldmatrix, at 0.44 a cycle a scheduler (Nsight Compute, H100/H200). The SASS showed where:
// the mask's 64-bit key tests, evaluated predicated on every tile (~370), exp2f's range handling (~100), and the
// tile copies' 64-bit index arithmetic (~27 instructions a 16-byte copy). With 32-bit column tests only where a
// row sees part of a tile, ex2.approx and 32-bit tile indices: 7.6 M instructions, 48.3 -> 33.2 us for that
// launch (H100, events).
//
// Where the warps then waited (Nsight Compute's stall samples by SASS line, H100, 2026-11-27): for the vision launch
// 44% in the tile's math, 21% waiting for the copies and widening, 20% computing the copies' addresses and issuing
// them, 11% in the prologue (q loaded and the block's key range agreed through shared atomics before the first copy
// was issued); for 512 causal queries the prologue was 18%, with one warp a scheduler. Now the block's range comes
// from its first and last rows, the first tile's copies go out before q is read, a copy's address is one add, the
// row maxima and sums run in four chains, and short causal grids split their keys between two groups: 237 causal
// queries 16.0 -> 12.5 us, 512 26.8 -> 19.4, 4,096 561 -> 452, 784 patches 32.3 -> 27.3 (`perf`, p50 of 20).
#include <cuda_fp16.h>

#include <array>
#include <atomic>
#include <cfloat>
#include <type_traits>
#include <utility>

#include "attention_mask.cuh"
#include "common.cuh"
#include "flash_attention_mma.cuh"
#include "flash_attention_shape.h"
#include "kv_cache.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kKeys = kFlashLayoutBlock;  // a key tile is one block of a block-sparse layout
static_assert(flash_group_shared_bytes(16, WeightType::BF16) == 2 * kKeys * 24 * 2 + 2 * kKeys * 16 * 2, "64-key tiles");

// The device helpers exist only where the kernel has a body (the host pass and SM80+).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// c += a·b for one 16x8 tile, k = 16 (PTX ISA: mma.m16n8k16, f16 inputs, f32 accumulators).
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Four 8x8 f16 matrices: lanes 8j..8j+7 give the row addresses of matrix j; lane l gets row l / 4, columns
// 2(l % 4) and + 1 of each (a B fragment when the rows are keys and the columns dimensions), or with kTransposed
// column l / 4, rows 2(l % 4) and + 1 (V's B fragments from its [key][dimension] rows).
template <bool kTransposed> __device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* row) {
#ifdef __CUDA_ARCH__
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTransposed)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#endif
}

// 16 bytes global -> shared without registers; `bytes` 0 fills the 16 with zeros (PTX ISA: cp.async, src-size).
__device__ __forceinline__ void copy_async_16(void* dst, const void* src, int bytes) {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(bytes));
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void copy_async_wait_all() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// Starts copying a tile's K and V rows as stored into `raw_k` and `raw_v` ([64][kPitch] each: D for the raw tiles,
// D + 8 for f16 ones copied straight into the tiles the fragments read): `k` and `v` point at the tile's first row of
// this kv head, rows `row_stride` elements apart; rows from `rows` on become zeros. A thread's
// pieces are its first row and column plus whole rows: the per-tile address work is one 64-bit add a piece (with
// the offsets computed per piece, 64-bit and signed, it was ~27 instructions a 16-byte copy in the SASS, and the
// copies' address work was 16% of the vision launch's instructions).
template <int D, int kThreads, typename KV, int kPitch>
__device__ __forceinline__ void fetch_tile(const KV* __restrict__ k, const KV* __restrict__ v, KV* raw_k, KV* raw_v,
                                           int rows, unsigned row_stride, unsigned thread) {
  constexpr unsigned kChunk = 16 / sizeof(KV), kChunks = D / kChunk, kCount = kKeys * kChunks;  // 16-byte pieces
  if constexpr (kThreads % kChunks == 0 && kThreads / kChunks <= kKeys) {
    constexpr unsigned kRowsApart = kThreads / kChunks;  // rows between a thread's pieces
    const unsigned row = thread / kChunks, column = (thread % kChunks) * kChunk;
    const KV* src_k = k + row * row_stride + column;
    const KV* src_v = v + row * row_stride + column;
    KV* dst_k = raw_k + row * kPitch + column;
    KV* dst_v = raw_v + row * kPitch + column;
#pragma unroll
    for (unsigned i = 0; i < kKeys / kRowsApart; ++i) {
      const bool inside = int(row + i * kRowsApart) < rows;
      const unsigned skip = i * kRowsApart * row_stride;
      // (A row past the tile copies nothing; its source is the tile's first row, which exists.)
      copy_async_16(dst_k + i * kRowsApart * kPitch, inside ? src_k + skip : k + column, inside ? 16 : 0);
      copy_async_16(dst_v + i * kRowsApart * kPitch, inside ? src_v + skip : v + column, inside ? 16 : 0);
    }
  } else {  // rows the threads do not divide (80 in bf16: 10 pieces a row), or tiles of fewer pieces than threads
#pragma unroll
    for (unsigned i = 0; i < (kCount + kThreads - 1) / kThreads; ++i) {
      const unsigned e = thread + i * kThreads, r = e / kChunks, c = (e % kChunks) * kChunk;
      if (kCount % kThreads != 0 && e >= kCount) break;
      const bool inside = int(r) < rows;
      const unsigned offset = inside ? r * row_stride + c : c;
      copy_async_16(raw_k + r * kPitch + c, k + offset, inside ? 16 : 0);
      copy_async_16(raw_v + r * kPitch + c, v + offset, inside ? 16 : 0);
    }
  }
}

// The raw tile widened into the f16 tile the fragments read ([64][D + 8]), rounded as the products' inputs are.
template <int D, int kThreads, typename KV>
__device__ __forceinline__ void widen_tile(const KV* raw, __half* dst, unsigned thread) {
  constexpr unsigned kStride = D + 8, kCount = kKeys * D / 4;
#pragma unroll
  for (unsigned i = 0; i < (kCount + kThreads - 1) / kThreads; ++i) {
    const unsigned e = thread + i * kThreads, r = e / (D / 4), c = (e % (D / 4)) * 4;
    if (kCount % kThreads != 0 && e >= kCount) break;
    const float4 x = load_kv4(raw + r * D + c);
    *reinterpret_cast<uint2*>(dst + r * kStride + c) = make_uint2(pack_half2(x.x, x.y), pack_half2(x.z, x.w));
  }
}

// 2^x on the special-function unit alone. exp2f adds a range check and two multiplies around it for results below
// 2^-126, which the softmax's f16 probabilities flush to zero anyway; -inf still gives 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y = 0.0f;
#ifdef __CUDA_ARCH__
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
#endif
  return y;
}
// Warps that share a staging buffer wait for each other on their own hardware barrier (1 + the group), so one
// group's copies and widening do not hold the other's math (PTX ISA: bar.sync with a thread count). The barrier's
// number is an immediate: with one from a register ptxas reserves all 16, which allows one block an SM.
template <int kGroups, int kGroupThreads> __device__ __forceinline__ void group_barrier(int group) {
  static_assert(kGroups <= 2, "a barrier number for each group");
  if constexpr (kGroups == 1) {
    __syncthreads();
  } else {
#ifdef __CUDA_ARCH__
    if (group == 0) asm volatile("bar.sync 1, %0;\n" ::"n"(kGroupThreads) : "memory");
    else asm volatile("bar.sync 2, %0;\n" ::"n"(kGroupThreads) : "memory");
#endif
  }
}
#endif

// A block's shape: kRowWarps warps of 16 query rows each (16·kRowWarps queries), repeated kGroups times; group j
// takes every kGroups-th of the key tiles the block sees, with its own staging buffers, and the groups' partial
// softmax sums are merged at the end. Splitting the keys is what gives a short causal grid its parallelism: 512
// causal queries are 8 blocks of 64 a head, and the last one reads all 8 tiles; with two groups it waits for 4.
template <int kRowWarps_, int kGroups_> struct FlashShape {
  static constexpr int kRowWarps = kRowWarps_, kGroups = kGroups_;
  static constexpr int kQueries = 16 * kRowWarps, kGroupThreads = 32 * kRowWarps, kThreads = kGroupThreads * kGroups;
};
static_assert(FlashShape<8, 1>::kQueries == 128, "flash_key_groups counts blocks of 128 queries");

// Keys and values stored in f16, copied into the tiles as they are (no raw tiles, no widening).
template <typename KV> constexpr bool kCopiedAsTiles = std::is_same_v<KV, __half>;
template <typename KV>
constexpr WeightType kTileSource = kCopiedAsTiles<KV> ? WeightType::F16 : sizeof(KV) == 2 ? WeightType::BF16 : WeightType::F32;
// Dynamic shared memory of one group: the f16 K and V tiles, then the raw ones (f16 sources: two stages of tiles).
template <int D, typename KV> constexpr int kGroupSharedBytes = flash_group_shared_bytes(D, kTileSource<KV>);
// A group past the first leaves its rows' maxima, sums and outputs in its own buffers for the first to merge, a row
// warp's at a time: a float per lane for each of its D / 2 accumulators, then the 16 rows' maxima, then their sums.
template <int D> struct MergeLayout {
  static constexpr int kBest = 32 * D / 2, kTotal = kBest + 16, kWarpFloats = kTotal + 16;
};

template <int D, typename KV, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, 1) flash_attention_mma_kernel(AttentionArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kStride = D + 8, kSteps = D / 16, kScoreTiles = kKeys / 8, kOutTiles = D / 8;
  constexpr int kRowWarps = Shape::kRowWarps, kGroups = Shape::kGroups, kQueries = Shape::kQueries;
  constexpr int kGroupThreads = Shape::kGroupThreads;
  using Merge = MergeLayout<D>;
  static_assert(kGroups == 1 || kRowWarps * Merge::kWarpFloats * 4 <= kGroupSharedBytes<D, KV>);
  extern __shared__ __align__(16) unsigned char shared[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int group = warp / kRowWarps, row_warp = warp % kRowWarps;
  const unsigned group_thread = threadIdx.x % kGroupThreads;
  constexpr bool kDirect = kCopiedAsTiles<KV>;
  unsigned char* const buffers = shared + group * kGroupSharedBytes<D, KV>;
  // Stage j's K tile, its V tile after it (f16 sources use stages 0 and 1; the others stage 0 and raw tiles after it).
  __half* const tiles = reinterpret_cast<__half*>(buffers);
  const auto keys_tile = [&](int stage) { return tiles + stage * 2 * kKeys * kStride; };
  KV* raw_k = reinterpret_cast<KV*>(keys_tile(1));
  KV* raw_v = raw_k + kKeys * D;
  const KV* __restrict__ k = static_cast<const KV*>(p.k);
  const KV* __restrict__ v = static_cast<const KV*>(p.v);

  const int64_t h = blockIdx.y, kvh = h / (p.hq / p.hkv);
  const int64_t q0 = int64_t(blockIdx.x) * kQueries, last_row = min(p.s, q0 + kQueries) - 1;
  // The keys rows `from`..`to` see between them: a row's range [lo, hi) never moves back as the row grows (causal:
  // [0, past + i + 1); segments: its image's), so the first row's lo and the last row's hi bound those between.
  const auto keys_of_rows = [&](int64_t from, int64_t to, int64_t& lo, int64_t& hi) {
    int64_t unused;
    visible_keys(from, p.kv_len, p.causal, p.past, p.bounds, p.segments, lo, unused);
    visible_keys(to, p.kv_len, p.causal, p.past, p.bounds, p.segments, unused, hi);
  };
  int64_t first, end;  // causal: first = 0, so tiles are layout blocks
  keys_of_rows(q0, last_row, first, end);
  const int64_t first_block = (p.past + q0) / kKeys, last_block = (p.past + last_row) / kKeys;
  // The first tile from t0 on that one of the block's (at most three) query blocks sees: others are skipped, loads
  // included (the same decision in every thread).
  const auto next_tile = [&](int64_t t0) {
    for (; p.layout && t0 < end; t0 += kKeys) {
      bool seen = false;
      for (int64_t qb = first_block; qb <= last_block; ++qb) seen |= p.layout[qb * p.layout_side + t0 / kKeys] != 0;
      if (seen) break;
    }
    return t0;
  };
  // The tile `count` seen tiles after t0: a group walks every kGroups-th.
  const auto tiles_on = [&](int64_t t0, int count) {
    for (int i = 0; i < count && t0 < end; ++i) t0 = next_tile(t0 + kKeys);
    return t0;
  };
  // Tile t0's first row of this kv head, and how many of its rows exist (the same offsets in k and v).
  const unsigned row_stride = unsigned(p.hkv * D);
  const auto fetch = [&](int64_t t0, int stage) {
    const int64_t offset = (t0 * p.hkv + kvh) * D;
    const int rows = int(min(int64_t(kKeys), end - t0));
    if constexpr (kDirect) {
      KV* const to = reinterpret_cast<KV*>(keys_tile(stage));
      fetch_tile<D, kGroupThreads, KV, kStride>(k + offset, v + offset, to, to + kKeys * kStride, rows, row_stride,
                                                group_thread);
    } else {
      fetch_tile<D, kGroupThreads, KV, D>(k + offset, v + offset, raw_k, raw_v, rows, row_stride, group_thread);
    }
    copy_async_commit();
  };
  // The first tile's copies go out before q and the rows' ranges are read, so that their trips overlap (the
  // prologue was 11-18% of the warps' stall samples in Nsight Compute when the copies waited for it).
  int64_t t0 = tiles_on(next_tile(first), group);
  int stage = 0;  // where this tile's f16 rows are (f16 sources alternate)
  if (t0 < end) fetch(t0, stage);

  // This thread's two query rows (fragment rows g and g + 8 of its warp's 16) and the keys each may see; the
  // warp's range, to skip tiles none of its rows sees.
  const int64_t row[2] = {q0 + row_warp * 16 + g, q0 + row_warp * 16 + g + 8};
  int64_t lo[2], hi[2];
  const int64_t* allowed[2] = {nullptr, nullptr};  // block-sparse: the row's line of the block layout
  for (int r = 0; r < 2; ++r) {
    lo[r] = hi[r] = 0;  // rows past the end see nothing
    if (row[r] < p.s) visible_keys(row[r], p.kv_len, p.causal, p.past, p.bounds, p.segments, lo[r], hi[r]);
    if (p.layout && row[r] < p.s) allowed[r] = p.layout + (p.past + row[r]) / kKeys * p.layout_side;
  }
  int64_t warp_lo = INT64_MAX, warp_hi = 0;
  const int64_t warp_row = q0 + row_warp * 16;
  if (warp_row <= last_row) keys_of_rows(warp_row, min(last_row, warp_row + 15), warp_lo, warp_hi);

  // q as A fragments: register j of step kk holds rows g / g + 8, dimensions 16·kk + 2·t4 (+ 8), pre-scaled so the
  // softmax can use exp2.
  uint32_t qa[kSteps][4];
  const float q_scale = p.scale * kLog2e;
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = row[j % 2];
      const int c = kk * 16 + 2 * t4 + (j / 2) * 8;
      float2 x = make_float2(0, 0);
      if (i < p.s) x = *reinterpret_cast<const float2*>(p.q + (i * p.hq + h) * D + c);
      qa[kk][j] = pack_half2(x.x * q_scale, x.y * q_scale);
    }

  float acc[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float best[2] = {-INFINITY, -INFINITY}, total[2] = {0.0f, 0.0f};  // total: this thread's part of the row sum

  for (int64_t next; t0 < end; t0 = next) {
    copy_async_wait_all();
    group_barrier<kGroups, kGroupThreads>(group);  // this tile's rows are in; the tiles of the one before are done
    const __half* const ks = keys_tile(stage);
    const __half* const vs = ks + kKeys * kStride;
    if constexpr (!kDirect) {
      widen_tile<D, kGroupThreads>(raw_k, keys_tile(0), group_thread);
      widen_tile<D, kGroupThreads>(raw_v, keys_tile(0) + kKeys * kStride, group_thread);
      group_barrier<kGroups, kGroupThreads>(group);  // the f16 tiles are ready and the raw buffer is free
    } else {
      stage ^= 1;  // the next tile's stage: the one the tile before was read from, which every warp is past
    }
    next = tiles_on(t0, kGroups);
    if (next < end) fetch(next, stage);  // in flight while this tile's math runs
    if (t0 >= warp_hi || t0 + kKeys <= warp_lo) continue;  // none of this warp's rows sees this tile

    float score[kScoreTiles][4];
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
      score[n][0] = score[n][1] = score[n][2] = score[n][3] = 0.0f;
      // Two steps' B fragments (keys n·8.., 16 dimensions each) in one ldmatrix: a quarter of the 32-bit loads.
      const __half* key = ks + (n * 8 + (lane & 7)) * kStride + (lane >> 3) * 8;
#pragma unroll
      for (int kk = 0; kk + 1 < kSteps; kk += 2) {
        uint32_t kb[4];
        ldmatrix_x4<false>(kb, key + kk * 16);
        mma_16x8x16(score[n], qa[kk], kb[0], kb[1]);
        mma_16x8x16(score[n], qa[kk + 1], kb[2], kb[3]);
      }
      if constexpr (kSteps % 2) {
        const __half* last = ks + (n * 8 + g) * kStride + (kSteps - 1) * 16 + 2 * t4;
        mma_16x8x16(score[n], qa[kSteps - 1], *reinterpret_cast<const uint32_t*>(last),
                    *reinterpret_cast<const uint32_t*>(last + 8));
      }
    }
    // Mask (where some row of the warp sees only part of the tile), then the online softmax per row (element j of
    // a score tile is row g for j < 2, row g + 8 after). Each row sees the tile's columns [first_col, end_col):
    // 32-bit column tests, and none on a tile every row of the warp sees whole (the 64-bit key tests, evaluated
    // predicated on every tile, were ~370 of the ~825 instructions of a warp's score, mask and softmax block at
    // D = 64, the tile copies and widening not counted).
    int first_col[2], end_col[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool sees = !allowed[r] || allowed[r][t0 / kKeys];
      first_col[r] = int(min(int64_t(kKeys), max(int64_t(0), lo[r] - t0)));
      end_col[r] = sees ? int(min(int64_t(kKeys), max(int64_t(first_col[r]), hi[r] - t0))) : first_col[r];
    }
    const bool whole_tile = first_col[0] == 0 && first_col[1] == 0 && end_col[0] == kKeys && end_col[1] == kKeys;
    if (!__all_sync(0xffffffffu, whole_tile)) {
#pragma unroll
      for (int n = 0; n < kScoreTiles; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int r = j / 2, col = n * 8 + 2 * t4 + (j % 2);
          if (unsigned(col - first_col[r]) >= unsigned(end_col[r] - first_col[r])) score[n][j] = -INFINITY;
        }
    }
    // Maxima and sums in four independent chains a row (a chain of 16 dependent instructions a row was the
    // "wait" stall at the top of Nsight Compute's list).
    float part_max[2][4];
#pragma unroll
    for (int c = 0; c < 4; ++c) part_max[0][c] = part_max[1][c] = -INFINITY;
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int chain = (n % 2) * 2 + j % 2;
        part_max[j / 2][chain] = fmaxf(part_max[j / 2][chain], score[n][j]);
      }
    float tile_max[2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
      tile_max[r] = fmaxf(fmaxf(part_max[r][0], part_max[r][1]), fmaxf(part_max[r][2], part_max[r][3]));
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The four lanes of a quad hold one row between them.
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float next_best = fmaxf(best[r], tile_max[r]);
      const float base = next_best == -INFINITY ? 0.0f : next_best;  // a row that has seen nothing yet stays at 0
      correction[r] = fast_exp2(best[r] - base);
      best[r] = next_best;
      float part_sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int n = 0; n < kScoreTiles; ++n) {
        score[n][2 * r] = fast_exp2(score[n][2 * r] - base);
        score[n][2 * r + 1] = fast_exp2(score[n][2 * r + 1] - base);
        part_sum[(n % 2) * 2] += score[n][2 * r];
        part_sum[(n % 2) * 2 + 1] += score[n][2 * r + 1];
      }
      total[r] = total[r] * correction[r] + ((part_sum[0] + part_sum[1]) + (part_sum[2] + part_sum[3]));
    }
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n) {
      acc[n][0] *= correction[0], acc[n][1] *= correction[0];
      acc[n][2] *= correction[1], acc[n][3] *= correction[1];
    }
    // p·V: keys 16·kk .. + 16 are score tiles 2kk and 2kk + 1, already in the A fragment's layout.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t pa[4] = {pack_half2(score[2 * kk][0], score[2 * kk][1]),
                              pack_half2(score[2 * kk][2], score[2 * kk][3]),
                              pack_half2(score[2 * kk + 1][0], score[2 * kk + 1][1]),
                              pack_half2(score[2 * kk + 1][2], score[2 * kk + 1][3])};
      const __half* v_rows = vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + (lane >> 4) * 8;
#pragma unroll
      for (int n = 0; n < kOutTiles; n += 2) {
        uint32_t vb[4];
        ldmatrix_x4<true>(vb, v_rows + n * 8);
        mma_16x8x16(acc[n], pa, vb[0], vb[1]);
        mma_16x8x16(acc[n + 1], pa, vb[2], vb[3]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    total[r] += __shfl_xor_sync(0xffffffffu, total[r], 1);
    total[r] += __shfl_xor_sync(0xffffffffu, total[r], 2);
  }
  if constexpr (kGroups > 1) {
    // The other groups' rows into the first's: each leaves its maxima, sums and accumulators in its own buffers
    // (free once every warp of the block is past its loop), and the first weighs them by exp2(max - merged max).
    __syncthreads();
    float* const merge = reinterpret_cast<float*>(buffers) + row_warp * Merge::kWarpFloats;
    if (group > 0) {
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) merge[(n * 4 + j) * 32 + lane] = acc[n][j];
      if (t4 == 0)
#pragma unroll
        for (int r = 0; r < 2; ++r) merge[Merge::kBest + g + 8 * r] = best[r], merge[Merge::kTotal + g + 8 * r] = total[r];
    }
    __syncthreads();
    if (group > 0) return;
#pragma unroll
    for (int other = 1; other < kGroups; ++other) {
      const float* theirs = merge + other * kGroupSharedBytes<D, KV> / 4;
      float mine_weight[2], their_weight[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float their_best = theirs[Merge::kBest + g + 8 * r], their_total = theirs[Merge::kTotal + g + 8 * r];
        const float m = fmaxf(best[r], their_best);
        mine_weight[r] = best[r] == -INFINITY ? 0.0f : fast_exp2(best[r] - m);
        their_weight[r] = their_best == -INFINITY ? 0.0f : fast_exp2(their_best - m);
        best[r] = m;
        total[r] = total[r] * mine_weight[r] + their_total * their_weight[r];
      }
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[n][j] = acc[n][j] * mine_weight[j / 2] + theirs[(n * 4 + j) * 32 + lane] * their_weight[j / 2];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= p.s) continue;
    const float inverse = total[r] > 0.0f ? 1.0f / total[r] : 0.0f;
    const int64_t at = (row[r] * p.hq + h) * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n) {
      const float x = acc[n][2 * r] * inverse, y = acc[n][2 * r + 1] * inverse;
      if (!p.operand) {
        *reinterpret_cast<float2*>(p.out + at + n * 8) = make_float2(x, y);
      } else if (p.operand_type == WeightType::BF16) {
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.operand) + at + n * 8) =
            uint32_t(round_to_bf16(x)) | uint32_t(round_to_bf16(y)) << 16;
      } else {
        *reinterpret_cast<__half2*>(static_cast<__half*>(p.operand) + at + n * 8) = __floats2half2_rn(x, y);
      }
    }
  }
#else
  __trap();  // flash_attention_mma_available keeps the host from launching this without SM80 code
#endif
}

// The shared memory a block of the current device (`device`) may opt in to, asked once a device.
int shared_per_block(int device) {
  static std::array<std::atomic<int>, 64> known{};  // devices past 63 ask every launch
  int bytes = device < 64 ? known[std::size_t(device)].load() : 0;
  if (bytes == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (device < 64) known[std::size_t(device)].store(bytes);
  }
  return bytes;
}

// Calls f(element) with a value of the keys' and values' element type: float, uint16_t (bf16) or __half.
template <typename F> void with_tile_source(WeightType kv, F&& f) {
  if (kv == WeightType::F16) f(__half{});
  else with_kv_type(kv, std::forward<F>(f));
}

template <int D, typename Shape> void launch_with(const AttentionArgs& a, int device, cudaStream_t stream) {
  const dim3 grid(unsigned((a.s + Shape::kQueries - 1) / Shape::kQueries), unsigned(a.hq));
  with_tile_source(a.kv_type, [&](auto element) {
    using KV = decltype(element);
    const auto kernel = flash_attention_mma_kernel<D, KV, Shape>;
    // Past the 48 KB a block gets without asking, once a device.
    constexpr int bytes = kGroupSharedBytes<D, KV> * Shape::kGroups;
    static std::atomic<uint64_t> opted_in{0};  // bit i: device i (devices past 63 ask every launch)
    const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
    if (!bit || !(opted_in.load() & bit)) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      opted_in.fetch_or(bit);
    }
    kernel<<<grid, Shape::kThreads, bytes, stream>>>(a);
    CUDA_CHECK_LAUNCH();
  });
}

// The block's shape. Measured on an H100 (2B shapes, `qvl-test-backend-ops perf`, p50 of 20; docs/performance.md):
// causal 237 queries 15.7 us with 8 row warps, 12.5 with 4 row warps in 2 key groups; causal 512 26.3 / 19.3; 4,096
// causal 446 / 460; a 448² picture's 784 patches (bidirectional, d = 64) 27.2 / 33.7, and 26.8 with 8 row warps in
// 2 groups (not kept: no faster, and 128 registers at 512 threads spill). Key groups help where the grid is short
// of blocks and its causal rows unequal; where blocks are many, 128 queries a block stage each tile for more rows.
// The key groups by flash_key_groups, for the device's shared memory a block.
template <int D> void launch(const AttentionArgs& a, int multiprocessors, cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (flash_key_groups(a.s, a.hq, a.d, a.kv_type, a.causal, multiprocessors, shared_per_block(device)) == 2)
    launch_with<D, FlashShape<4, 2>>(a, device, stream);
  else launch_with<D, FlashShape<8, 1>>(a, device, stream);
}

}  // namespace

// The build's architecture list decides too: a kernel JIT-compiled from compute_75 PTX has no tensor-core body.
bool flash_attention_mma_available() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  if (props.major < 8) return false;
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, flash_attention_mma_kernel<64, float, FlashShape<8, 1>>) != cudaSuccess) {
    (void)cudaGetLastError();  // no image for this device: not an error of this call's caller
    return false;
  }
  return attributes.ptxVersion >= 80 || attributes.binaryVersion >= 80;
}

bool flash_attention_mma_fits(int64_t d) { return d > 0 && d % 16 == 0 && d <= 128; }

void flash_attention_mma(const AttentionArgs& a, int multiprocessors, cudaStream_t stream) {
  if (!flash_attention_mma_fits(a.d))
    throw std::runtime_error("flash_attention_mma: head_dim must be a multiple of 16, at most 128");
  if (!a.operand == !a.out || (a.operand && a.operand_type == WeightType::F32))
    throw std::runtime_error("flash_attention_mma: one result, f32 into out or a 16-bit operand");
  if (a.s == 0 || a.hq == 0) return;
  using Launch = decltype(&launch<16>);
  const Launch by_size[] = {launch<16>, launch<32>, launch<48>, launch<64>, launch<80>, launch<96>, launch<112>,
                            launch<128>};
  by_size[a.d / 16 - 1](a, multiprocessors, stream);
}

}  // namespace qvl::cuda
