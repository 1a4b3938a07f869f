// Flash-style attention on CUDA cores (f32 math, so one kernel serves Pascal and the SM61 profile).
// A block of 4 warps takes 16 queries of one head; each warp owns 4 of them. The block walks the keys its queries
// may see in tiles of 32, staged in shared memory: K with rows padded by 4 floats (lane j reads key j with 16-byte
// loads, conflict-free), V unpadded (lanes read consecutive dimensions). Per tile a lane scores its key against the
// warp's 4 queries (the query tile is read as broadcasts), the warp updates each query's running max and sum
// (online softmax, nothing of size S x T is stored), and then accumulates p·V with each lane owning D/32 output
// dimensions. Every K/V element is read from DRAM once per 16 queries instead of once per query, so the kernel is
// bound by the FMAs (4·S·T·D per head) rather than memory. Shared memory: (16·D + 32·(D + 4) + 32·D)·4 bytes =
// 41 KB at D = 128, inside Pascal's 48 KB per block.
#include <cfloat>

#include "attention_mask.cuh"
#include "common.cuh"
#include "flash_attention.cuh"
#include "kv_cache.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 4, kQueriesPerWarp = 4, kQueries = kWarps * kQueriesPerWarp, kKeys = 32;

template <int kChunks, typename KV>  // D <= 32 · kChunks; K and V f32 or bf16 (widened as they are staged)
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_kernel(const float* __restrict__ q, const KV* __restrict__ k, const KV* __restrict__ v,
                           float* __restrict__ out, int64_t s, int64_t hq, int64_t hkv, int d, int64_t kv_len,
                           bool causal, int64_t past, const int64_t* __restrict__ bounds, int64_t segments, float scale,
                           const int64_t* __restrict__ layout, int64_t layout_side) {
  extern __shared__ float4 shared4[];
  float* qs = reinterpret_cast<float*>(shared4);  // [16][d], pre-scaled
  const int k_stride = d + 4;
  float* ks = qs + kQueries * d;                   // [32][d + 4]
  float* vs = ks + kKeys * k_stride;               // [32][d]
  __shared__ int64_t warp_lo[kWarps], warp_hi[kWarps];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t h = blockIdx.y, kvh = h / (hq / hkv), q0 = int64_t(blockIdx.x) * kQueries;
  const int vecs = d / 4;
  for (int e = threadIdx.x; e < kQueries * vecs; e += blockDim.x) {
    const int r = e / vecs, c = (e % vecs) * 4;
    const int64_t i = q0 + r;
    float4 val = make_float4(0, 0, 0, 0);
    if (i < s) {
      val = *reinterpret_cast<const float4*>(q + (i * hq + h) * d + c);
      val.x *= scale, val.y *= scale, val.z *= scale, val.w *= scale;
    }
    *reinterpret_cast<float4*>(qs + r * d + c) = val;
  }
  int64_t lo[kQueriesPerWarp], hi[kQueriesPerWarp];
  const int64_t* allowed[kQueriesPerWarp];  // block-sparse: the row's line of the block layout
  int64_t my_lo = INT64_MAX, my_hi = 0;
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    const int64_t i = q0 + warp * kQueriesPerWarp + r;
    lo[r] = hi[r] = 0;  // rows past the end see nothing
    allowed[r] = layout && i < s ? layout + (past + i) / kFlashLayoutBlock * layout_side : nullptr;
    if (i < s) visible_keys(i, kv_len, causal, past, bounds, segments, lo[r], hi[r]);
    if (lo[r] < hi[r]) my_lo = min(my_lo, lo[r]), my_hi = max(my_hi, hi[r]);
  }
  if (lane == 0) warp_lo[warp] = my_lo, warp_hi[warp] = my_hi;
  __syncthreads();
  int64_t block_lo = INT64_MAX, block_hi = 0;
  for (int w = 0; w < kWarps; ++w) block_lo = min(block_lo, warp_lo[w]), block_hi = max(block_hi, warp_hi[w]);

  float best[kQueriesPerWarp], total[kQueriesPerWarp], acc[kQueriesPerWarp][kChunks];
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    best[r] = -INFINITY, total[r] = 0.0f;
    for (int c = 0; c < kChunks; ++c) acc[r][c] = 0.0f;
  }
  const float* my_q = qs + warp * kQueriesPerWarp * d;
  // Causal: block_lo = 0, so a 32-key tile lies inside one layout block.
  const int64_t first_block = (past + q0) / kFlashLayoutBlock;
  const int64_t last_block = (past + min(s, q0 + kQueries) - 1) / kFlashLayoutBlock;
  for (int64_t t0 = block_lo; t0 < block_hi; t0 += kKeys) {
    if (layout) {  // skip, loads included, a key block none of the block's query blocks sees (the same in every thread)
      bool seen = false;
      for (int64_t qb = first_block; qb <= last_block; ++qb)
        seen |= layout[qb * layout_side + t0 / kFlashLayoutBlock] != 0;
      if (!seen) continue;
    }
    __syncthreads();  // everyone is done with the previous tile
    // Unrolled: each thread's 2 x 8 loads of a tile (D = 128) are in flight together instead of one at a time.
#pragma unroll 8
    for (int e = threadIdx.x; e < kKeys * vecs; e += blockDim.x) {
      const int r = e / vecs, c = (e % vecs) * 4;
      const int64_t t = t0 + r;
      float4 kv = make_float4(0, 0, 0, 0), vv = kv;
      if (t < block_hi) {
        kv = load_kv4(k + (t * hkv + kvh) * d + c);
        vv = load_kv4(v + (t * hkv + kvh) * d + c);
      }
      *reinterpret_cast<float4*>(ks + r * k_stride + c) = kv;
      *reinterpret_cast<float4*>(vs + r * d + c) = vv;
    }
    __syncthreads();
    if (t0 >= my_hi || t0 + kKeys <= my_lo) continue;  // none of this warp's queries sees this tile

    float score[kQueriesPerWarp] = {};
    const float* my_key = ks + lane * k_stride;
    for (int c = 0; c < d; c += 4) {
      const float4 kk = *reinterpret_cast<const float4*>(my_key + c);
#pragma unroll
      for (int r = 0; r < kQueriesPerWarp; ++r) {
        const float4 qq = *reinterpret_cast<const float4*>(my_q + r * d + c);
        score[r] += qq.x * kk.x + qq.y * kk.y + qq.z * kk.z + qq.w * kk.w;
      }
    }
    const int64_t t = t0 + lane;
    float p[kQueriesPerWarp];
#pragma unroll
    for (int r = 0; r < kQueriesPerWarp; ++r) {
      const bool visible = t >= lo[r] && t < hi[r] && (!allowed[r] || allowed[r][t0 / kFlashLayoutBlock]);
      const float sv = visible ? score[r] : -INFINITY;
      const float next_best = fmaxf(best[r], warp_max(sv));
      if (next_best == -INFINITY) {  // nothing visible to this query yet (the same on every lane)
        p[r] = 0.0f;
        continue;
      }
      const float correction = expf(best[r] - next_best);
      p[r] = visible ? expf(sv - next_best) : 0.0f;
      total[r] = total[r] * correction + warp_sum(p[r]);
      for (int c = 0; c < kChunks; ++c) acc[r][c] *= correction;
      best[r] = next_best;
    }
#pragma unroll 4
    for (int j = 0; j < kKeys; ++j) {
      float pj[kQueriesPerWarp];
#pragma unroll
      for (int r = 0; r < kQueriesPerWarp; ++r) pj[r] = __shfl_sync(0xffffffffu, p[r], j);
      const float* v_row = vs + j * d;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int e = lane + 32 * c;
        const float vv = e < d ? v_row[e] : 0.0f;
#pragma unroll
        for (int r = 0; r < kQueriesPerWarp; ++r) acc[r][c] += pj[r] * vv;
      }
    }
  }
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    const int64_t i = q0 + warp * kQueriesPerWarp + r;
    if (i >= s) continue;
    for (int c = 0; c < kChunks; ++c) {
      const int e = lane + 32 * c;
      if (e < d) out[(i * hq + h) * d + e] = total[r] > 0.0f ? acc[r][c] / total[r] : 0.0f;
    }
  }
}

template <int kChunks> void launch(const AttentionArgs& a, cudaStream_t stream) {
  const std::size_t shared = std::size_t(kQueries * a.d + kKeys * (a.d + 4) + kKeys * a.d) * sizeof(float);
  const dim3 grid(unsigned((a.s + kQueries - 1) / kQueries), unsigned(a.hq));
  with_kv_type(a.kv_type, [&](auto element) {
    using KV = decltype(element);
    flash_attention_kernel<kChunks, KV><<<grid, kWarps * 32, shared, stream>>>(
        a.q, static_cast<const KV*>(a.k), static_cast<const KV*>(a.v), a.out, a.s, a.hq, a.hkv, int(a.d), a.kv_len,
        a.causal, a.past, a.bounds, a.segments, a.scale, a.layout, a.layout_side);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

bool flash_attention_fits(int64_t d) { return d > 0 && d % 4 == 0 && d <= 128; }

void flash_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (!flash_attention_fits(a.d)) throw std::runtime_error("flash_attention: head_dim must be a multiple of 4, at most 128");
  if (a.s == 0 || a.hq == 0) return;
  using Launch = decltype(&launch<1>);
  const Launch by_chunks[] = {launch<1>, launch<2>, launch<3>, launch<4>};  // D <= 32 · chunks
  by_chunks[(a.d + 31) / 32 - 1](a, stream);
}

}  // namespace qvl::cuda
