// Flash attention on tensor cores (FlashAttention-2's layout, written with mma.sync so it runs on SM80 and SM90).
// Why: the CUDA-core kernel (flash_attention.cu) runs at 8-12 TFLOP/s on an H100 and was 27% of a 512-token prefill
// and 43% of a 448x448 vision encode; an H100's f16 tensor cores (mma.sync m16n8k16, f32 accumulate) peak at ~990
// dense TFLOP/s against ~67 for f32 on CUDA cores.
//
// A block of 8 warps takes 128 queries of one head (4 warps and 64 queries for small causal grids: see launch);
// each warp owns 16 query rows and keeps them in registers as A fragments (q·scale·log2 e, f16) for the whole key
// loop. Per tile of 64 keys the block stages K and V in shared
// memory as f16 ([key][D + 8]: the 8-half pad puts the 8 rows a fragment load touches in different banks); each
// warp computes its 16 x 64 scores with mma (B = K rows, two steps' fragments an ldmatrix), masks them, updates the running
// row max and sum in registers (online softmax: the score fragment's layout is the A fragment's, so p never goes
// through shared memory), and accumulates p·V with mma, V's B fragments loaded transposed by ldmatrix. Each K/V
// element is read from global memory once per block of queries (128 or 64); the block skips tiles none of its queries sees (causal
// tail, other images' segments), and a warp skips the math of tiles none of its rows sees.
// Registers at D = 128: 32 for q, 32 for the scores, 64 for the output.
//
// The tiles are pipelined: the next tile's keys and values are copied as stored (f32 or bf16) into a raw buffer with
// cp.async while the warps compute on the current one, then widened into the f16 tiles between two barriers. Before,
// each tile was loaded, converted and stored by every thread with nothing to overlap the loads: on an H200, 512
// causal queries took 51 us a layer, ~6 us a tile against ~1 us of tensor-core work. Shared memory (dynamic):
// f16 tiles 2 x 64 x (D + 8) x 2 B, raw 2 x 64 x D x (2 or 4) B: 66 KB at D = 128 from a bf16 cache.
//
// Instructions a tile: the vision launch (784 patches, d = 64) issued 14.8 M warp instructions, ~1,270 a warp a tile
// against 64 mma and 32 ldmatrix, at 0.44 a cycle a scheduler (Nsight Compute, H100/H200). The SASS showed where:
// the mask's 64-bit key tests, evaluated predicated on every tile (~370), exp2f's range handling (~100), and the
// tile copies' 64-bit index arithmetic (~27 instructions a 16-byte copy). With 32-bit column tests only where a
// row sees part of a tile, ex2.approx and 32-bit tile indices: 7.6 M instructions, 48.3 -> 33.2 us for that
// launch (H100, events).
#include <cuda_fp16.h>

#include <atomic>
#include <cfloat>

#include "attention_mask.cuh"
#include "common.cuh"
#include "flash_attention_mma.cuh"
#include "kv_cache.cuh"

namespace qvl::cuda {
namespace {

constexpr int kKeys = kFlashLayoutBlock;  // a key tile is one block of a block-sparse layout

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

// Starts copying a tile's rows as stored into `raw` ([64][D]): `src` is the tile's first row of this kv head, rows
// `row_stride` elements apart, and rows from `rows` on become zeros. The indices are 32-bit and unsigned, and the
// loop has a fixed trip count: with 64-bit signed ones the address arithmetic took ~27 instructions a 16-byte copy
// (SASS, D = 64 f32), more than the copies and the tile's widening together.
template <int D, int kThreads, typename KV>
__device__ __forceinline__ void fetch_tile(const KV* __restrict__ src, KV* raw, int rows, unsigned row_stride) {
  constexpr unsigned kChunk = 16 / sizeof(KV), kChunks = D / kChunk, kCount = kKeys * kChunks;  // 16-byte pieces
#pragma unroll
  for (unsigned i = 0; i < (kCount + kThreads - 1) / kThreads; ++i) {
    const unsigned e = threadIdx.x + i * kThreads, r = e / kChunks, c = (e % kChunks) * kChunk;
    if (kCount % kThreads != 0 && e >= kCount) break;
    const bool inside = int(r) < rows;
    copy_async_16(raw + r * D + c, src + (inside ? r * row_stride + c : c), inside ? 16 : 0);
  }
}

// The raw tile widened into the f16 tile the fragments read ([64][D + 8]), rounded as the products' inputs are.
template <int D, int kThreads, typename KV> __device__ __forceinline__ void widen_tile(const KV* raw, __half* dst) {
  constexpr unsigned kStride = D + 8, kCount = kKeys * D / 4;
#pragma unroll
  for (unsigned i = 0; i < (kCount + kThreads - 1) / kThreads; ++i) {
    const unsigned e = threadIdx.x + i * kThreads, r = e / (D / 4), c = (e % (D / 4)) * 4;
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
#endif

// Dynamic shared memory of one block: the f16 K and V tiles, then the raw ones.
template <int D, typename KV> constexpr int shared_bytes() {
  return 2 * kKeys * (D + 8) * 2 + 2 * kKeys * D * int(sizeof(KV));
}

template <int D, typename KV, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_mma_kernel(const float* __restrict__ q, const KV* __restrict__ k, const KV* __restrict__ v,
                               float* __restrict__ out, int64_t s, int64_t hq, int64_t hkv, int64_t kv_len, bool causal,
                               int64_t past, const int64_t* __restrict__ bounds, int64_t segments, float scale,
                               const int64_t* __restrict__ layout, int64_t layout_side) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kStride = D + 8, kSteps = D / 16, kScoreTiles = kKeys / 8, kOutTiles = D / 8;
  constexpr int kQueries = 16 * kWarps, kThreads = 32 * kWarps;
  extern __shared__ __align__(16) unsigned char shared[];
  __half* ks = reinterpret_cast<__half*>(shared);
  __half* vs = ks + kKeys * kStride;
  KV* raw_k = reinterpret_cast<KV*>(vs + kKeys * kStride);
  KV* raw_v = raw_k + kKeys * D;
  __shared__ int64_t block_lo, block_hi;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t h = blockIdx.y, kvh = h / (hq / hkv);
  // This thread's two query rows (fragment rows g and g + 8 of its warp's 16) and the keys each may see.
  const int64_t q0 = int64_t(blockIdx.x) * kQueries, row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  int64_t lo[2], hi[2];
  const int64_t* allowed[2] = {nullptr, nullptr};  // block-sparse: the row's line of the block layout
  for (int r = 0; r < 2; ++r) {
    lo[r] = hi[r] = 0;  // rows past the end see nothing
    if (row[r] < s) visible_keys(row[r], kv_len, causal, past, bounds, segments, lo[r], hi[r]);
    if (layout && row[r] < s) allowed[r] = layout + (past + row[r]) / kKeys * layout_side;
  }
  int64_t warp_lo = lo[0] < hi[0] ? lo[0] : INT64_MAX, warp_hi = lo[0] < hi[0] ? hi[0] : 0;
  if (lo[1] < hi[1]) warp_lo = min(warp_lo, lo[1]), warp_hi = max(warp_hi, hi[1]);
  for (int o = 16; o > 0; o /= 2) {
    warp_lo = min(warp_lo, __shfl_xor_sync(0xffffffffu, warp_lo, o));
    warp_hi = max(warp_hi, __shfl_xor_sync(0xffffffffu, warp_hi, o));
  }
  if (threadIdx.x == 0) block_lo = INT64_MAX, block_hi = 0;
  __syncthreads();
  if (lane == 0 && warp_lo < warp_hi) {
    atomicMin(reinterpret_cast<long long*>(&block_lo), static_cast<long long>(warp_lo));
    atomicMax(reinterpret_cast<long long*>(&block_hi), static_cast<long long>(warp_hi));
  }

  // q as A fragments: register j of step kk holds rows g / g + 8, dimensions 16·kk + 2·t4 (+ 8), pre-scaled so the
  // softmax can use exp2.
  uint32_t qa[kSteps][4];
  const float q_scale = scale * kLog2e;
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = row[j % 2];
      const int c = kk * 16 + 2 * t4 + (j / 2) * 8;
      float2 x = make_float2(0, 0);
      if (i < s) x = *reinterpret_cast<const float2*>(q + (i * hq + h) * D + c);
      qa[kk][j] = pack_half2(x.x * q_scale, x.y * q_scale);
    }

  float acc[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float best[2] = {-INFINITY, -INFINITY}, total[2] = {0.0f, 0.0f};  // total: this thread's part of the row sum

  __syncthreads();
  const int64_t first = block_lo, end = block_hi;  // causal: first = 0, so tiles are layout blocks
  const int64_t first_block = (past + q0) / kKeys, last_block = (past + min(s, q0 + kQueries) - 1) / kKeys;
  // The first tile from t0 on that one of the block's (at most three) query blocks sees: others are skipped, loads
  // included (the same decision in every thread).
  const auto next_tile = [&](int64_t t0) {
    for (; layout && t0 < end; t0 += kKeys) {
      bool seen = false;
      for (int64_t qb = first_block; qb <= last_block; ++qb) seen |= layout[qb * layout_side + t0 / kKeys] != 0;
      if (seen) break;
    }
    return t0;
  };
  // Tile t0's first row of this kv head, and how many of its rows exist (the same offsets in k and v).
  const unsigned row_stride = unsigned(hkv * D);
  const auto fetch = [&](int64_t t0) {
    const int64_t offset = (t0 * hkv + kvh) * D;
    const int rows = int(min(int64_t(kKeys), end - t0));
    fetch_tile<D, kThreads>(k + offset, raw_k, rows, row_stride);
    fetch_tile<D, kThreads>(v + offset, raw_v, rows, row_stride);
    copy_async_commit();
  };
  int64_t t0 = next_tile(first);
  if (t0 < end) fetch(t0);
  for (int64_t next; t0 < end; t0 = next) {
    copy_async_wait_all();
    __syncthreads();  // this tile's raw rows are in, and everyone is done with the previous f16 tiles
    widen_tile<D, kThreads>(raw_k, ks);
    widen_tile<D, kThreads>(raw_v, vs);
    __syncthreads();  // the f16 tiles are ready and the raw buffer is free
    next = next_tile(t0 + kKeys);
    if (next < end) fetch(next);  // in flight while this tile's math runs
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
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) tile_max[j / 2] = fmaxf(tile_max[j / 2], score[n][j]);
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The four lanes of a quad hold one row between them.
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float next = fmaxf(best[r], tile_max[r]);
      const float base = next == -INFINITY ? 0.0f : next;  // a row that has seen nothing yet stays at 0
      correction[r] = fast_exp2(best[r] - base);
      best[r] = next;
      total[r] *= correction[r];
#pragma unroll
      for (int n = 0; n < kScoreTiles; ++n) {
        score[n][2 * r] = fast_exp2(score[n][2 * r] - base);
        score[n][2 * r + 1] = fast_exp2(score[n][2 * r + 1] - base);
        total[r] += score[n][2 * r] + score[n][2 * r + 1];
      }
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
    if (row[r] >= s) continue;
    const float inverse = total[r] > 0.0f ? 1.0f / total[r] : 0.0f;
    float* dst = out + (row[r] * hq + h) * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n)
      *reinterpret_cast<float2*>(dst + n * 8) = make_float2(acc[n][2 * r] * inverse, acc[n][2 * r + 1] * inverse);
  }
#else
  __trap();  // flash_attention_mma_available keeps the host from launching this without SM80 code
#endif
}

template <int D, int kWarps> void launch_with(const AttentionArgs& a, cudaStream_t stream) {
  constexpr int kQueries = 16 * kWarps;
  const dim3 grid(unsigned((a.s + kQueries - 1) / kQueries), unsigned(a.hq));
  with_kv_type(a.kv_bf16, [&](auto element) {
    using KV = decltype(element);
    const auto kernel = flash_attention_mma_kernel<D, KV, kWarps>;
    constexpr int bytes = shared_bytes<D, KV>();  // past the 48 KB a block gets without asking, once a device
    static std::atomic<uint64_t> opted_in{0};      // bit i: device i (devices past 63 ask every launch)
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
    if (!bit || !(opted_in.load() & bit)) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      opted_in.fetch_or(bit);
    }
    kernel<<<grid, kWarps * 32, bytes, stream>>>(a.q, static_cast<const KV*>(a.k), static_cast<const KV*>(a.v), a.out,
                                                  a.s, a.hq, a.hkv, a.kv_len, a.causal, a.past, a.bounds, a.segments,
                                                  a.scale, a.layout, a.layout_side);
    CUDA_CHECK_LAUNCH();
  });
}

// 8 warps (128 queries) a block, each staged K/V tile serving more queries; 4 for a causal grid that would leave SMs
// idle at 8. Measured on an H100 (2B shapes, each kernel timed with events, two rounds): a 448² picture's 784
// patches x 16 heads (d = 64, 112 blocks of 8 warps) 33.0-33.4 us at 8 warps, 39.1-39.5 at 4; causal 512 queries
// (64 blocks of 8) 29.3-29.4 at 8, 27.3-27.8 at 4; causal 237 queries 17.2-17.7 at 8, 16.4-16.5 at 4. Causal
// blocks do unequal work (the last query block reads every tile, the first one), so smaller blocks even it out;
// a bidirectional grid's blocks are all alike, and fewer, fuller blocks stage each tile for more queries.
template <int D> void launch(const AttentionArgs& a, int multiprocessors, cudaStream_t stream) {
  constexpr int64_t kWideQueries = 16 * 8;
  const int64_t wide_blocks = (a.s + kWideQueries - 1) / kWideQueries * a.hq;
  if (a.causal && wide_blocks < multiprocessors) launch_with<D, 4>(a, stream);
  else launch_with<D, 8>(a, stream);
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
  if (cudaFuncGetAttributes(&attributes, flash_attention_mma_kernel<64, float, 8>) != cudaSuccess) {
    (void)cudaGetLastError();  // no image for this device: not an error of this call's caller
    return false;
  }
  return attributes.ptxVersion >= 80 || attributes.binaryVersion >= 80;
}

bool flash_attention_mma_fits(int64_t d) { return d > 0 && d % 16 == 0 && d <= 128; }

void flash_attention_mma(const AttentionArgs& a, int multiprocessors, cudaStream_t stream) {
  if (!flash_attention_mma_fits(a.d))
    throw std::runtime_error("flash_attention_mma: head_dim must be a multiple of 16, at most 128");
  if (a.s == 0 || a.hq == 0) return;
  using Launch = decltype(&launch<16>);
  const Launch by_size[] = {launch<16>, launch<32>, launch<48>, launch<64>, launch<80>, launch<96>, launch<112>,
                            launch<128>};
  by_size[a.d / 16 - 1](a, multiprocessors, stream);
}

}  // namespace qvl::cuda
