// Online-softmax attention (no score matrix is stored, any length works); each lane owns D/32 output dimensions
// (D <= 256). For what the tiled flash kernels (flash_attention.cu, flash_attention_mma.cu) do not take:
// - few (query, head) pairs (decode: one query x heads): split-K over the cache. The shapes models decode with go to
//   attention_decode.cu (a warp per tile of keys for all the query heads of a kv head); the rest (odd head sizes,
//   GQA groups of 3, ...) to the split kernel here. The keys are cut into chunks so that chunks x pairs fill the
//   GPU twice; a block of 4 warps takes one chunk of one pair, merges its warps' (max, sum, accumulator) triples in
//   shared memory (4 KB at D = 256) and writes them as a partial; the last block of a pair to finish merges the
//   pair's partials (split_merge.cuh).
// - otherwise (a few queries, or head sizes the flash kernel does not take): one warp per pair.
// Both walk the keys in tiles of 16 keys (8 at D > 128), two (four) lanes a key, every load of a tile issued before
// any is used (warp_attend), so a warp has a whole tile in flight, and small tiles make enough warps to fill the GPU
// at short contexts. (Key by key, or 32-key tiles with rolled loops, a warp waited one DRAM round trip per load:
// 28-41 us for 256 keys in Nsight Compute.)
#include <algorithm>

#include "attention.cuh"
#include "attention_decode.cuh"
#include "attention_mask.cuh"
#include "common.cuh"
#include "kv_cache.cuh"
#include "split_merge.cuh"

namespace qvl::cuda {
namespace {

constexpr int kMaxPerLane = 8;  // D <= 256

// One warp's running max, sum and weighted values; kPerLane >= D/32 output dimensions a lane (1, 2, 4 or 8: the
// loops below are unrolled over it, so a lane holds only the registers its head size needs).
template <int kPerLane>
struct SoftmaxState {
  float best = -INFINITY, total = 0.0f;
  float acc[kPerLane] = {};
};

// The warp's online softmax over tiles of kTileKeys keys starting at first, first + tile_step, ... (< hi):
// 32 / kTileKeys lanes share a key (each its share of the dimensions, then a shuffle or two). Every load of a tile,
// the keys' shares and all its value rows, is issued before any is used, so a tile costs one DRAM round trip: keys
// past `hi` read the last visible row instead (in bounds) and are masked by their probability of 0. (The value rows
// were loaded inside the loop that used them, behind a break at the tile's end: a round trip per row, 62.8 us for
// 4,096 keys where this takes 25.3 on an H100; docs/performance.md.)
// q_scaled: the query times the scale, in shared memory (read as broadcasts).
template <int kPerLane>
constexpr int kTileKeys = kPerLane >= 8 ? 8 : 16;  // 16 keys: twice the loads in flight; 8 at D = 256 (registers)
template <int kPerLane, typename KV>
__device__ void warp_attend(SoftmaxState<kPerLane>& st, const float* q_scaled, const KV* k, const KV* v,
                            int64_t hkv, int64_t kvh, int64_t d, int64_t first, int64_t hi, int64_t tile_step, int lane) {
  constexpr int kTile = kTileKeys<kPerLane>, kLanesPerKey = 32 / kTile;
  constexpr int kQuads = 8 * kPerLane / kLanesPerKey;  // float4s of a lane's share of a key: d / (4 * lanes per key)
  const int part = lane % kLanesPerKey;
  for (int64_t tile = first; tile < hi; tile += tile_step) {
    const int64_t t = tile + lane / kLanesPerKey;
    const KV* key = k + (min(t, hi - 1) * hkv + kvh) * d;
    float values[kTile][kPerLane];
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) {
      const KV* value = v + (min(tile + jj, hi - 1) * hkv + kvh) * d;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) values[jj][j] = lane + 32 * j < d ? load_kv(value + lane + 32 * j) : 0.0f;
    }
    float dot = 0.0f;
    if (d % 4 == 0) {
      float4 keys[kQuads];
#pragma unroll
      for (int i = 0; i < kQuads; ++i) {
        const int64_t c = 4 * part + 4 * kLanesPerKey * i;
        keys[i] = c < d ? load_kv4(key + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int i = 0; i < kQuads; ++i) {
        const int64_t c = 4 * part + 4 * kLanesPerKey * i;
        if (c < d) dot += q_scaled[c] * keys[i].x + q_scaled[c + 1] * keys[i].y + q_scaled[c + 2] * keys[i].z +
                          q_scaled[c + 3] * keys[i].w;
      }
    } else {
      for (int64_t c = part; c < d; c += kLanesPerKey) dot += q_scaled[c] * load_kv(key + c);
    }
#pragma unroll
    for (int lanes = 1; lanes < kLanesPerKey; lanes *= 2) dot += __shfl_xor_sync(0xffffffffu, dot, lanes);
    const float score = t < hi ? dot : -INFINITY;
    const float next_best = fmaxf(st.best, warp_max(score));  // finite: the tile's first key is always visible
    const float p = t < hi ? expf(score - next_best) : 0.0f, correction = expf(st.best - next_best);
    st.total = st.total * correction + warp_sum(part == 0 ? p : 0.0f);
    st.best = next_best;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) st.acc[j] *= correction;
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj * kLanesPerKey);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) st.acc[j] += pj * values[jj][j];
    }
  }
}

__device__ void load_scaled(float* dst, const float* q, int64_t d, float scale, int first_thread, int threads) {
  for (int64_t e = threadIdx.x - first_thread; e < d; e += threads) dst[e] = q[e] * scale;
}

template <int kPerLane, typename KV>
__global__ void attention_kernel(const float* q, const KV* k, const KV* v, float* out, int64_t s, int64_t hq,
                                 int64_t hkv, int64_t d, int64_t kv_len, bool causal, int64_t past, const int64_t* bounds,
                                 int64_t segments, float scale) {
  __shared__ float q_scaled[4][32 * kMaxPerLane];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t task = int64_t(blockIdx.x) * (blockDim.x / 32) + warp;
  if (task >= s * hq) return;
  const int64_t i = task / hq, h = task % hq;
  load_scaled(q_scaled[warp], q + (i * hq + h) * d, d, scale, warp * 32, 32);
  __syncwarp();
  int64_t lo, hi;
  visible_keys(i, kv_len, causal, past, bounds, segments, lo, hi);
  SoftmaxState<kPerLane> st;
  warp_attend(st, q_scaled[warp], k, v, hkv, h / (hq / hkv), d, lo, hi, kTileKeys<kPerLane>, lane);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t e = lane + 32 * j;
    if (e < d) out[(i * hq + h) * d + e] = st.acc[j] / st.total;
  }
}

constexpr int kSplitWarps = 4;

// The split of one pair's keys [lo, hi) over at most `max_chunks` blocks: whole tiles per warp.
template <int kTile>
__device__ __forceinline__ void chunking(int64_t keys, int64_t max_chunks, int64_t& chunks, int64_t& chunk_keys) {
  constexpr int64_t kBlockTile = kTile * kSplitWarps;
  chunks = max(int64_t(1), min(max_chunks, (keys + kBlockTile - 1) / kBlockTile));
  chunk_keys = ((keys + chunks - 1) / chunks + kTile - 1) / kTile * kTile;
}

// One block per (chunk of keys, query-head pair): its warps take every kSplitWarps-th tile of keys of the chunk;
// the warps' (max, sum, accumulator) triples are merged in shared memory and written as the chunk's partial result,
// or, when there is a single chunk, as the output itself. With several chunks, the pair's last block to finish
// merges the partials; it finds it is last from the pair's counter in `arrivals`, and sets the counter back to 0 for
// the next call (they start at 0: the caller zeroes them once).
template <int kPerLane, typename KV>
__global__ void attention_chunk_kernel(const float* q, const KV* k, const KV* v, float* out, float* partials,
                                       unsigned* arrivals, int64_t s, int64_t hq, int64_t hkv, int64_t d, int64_t kv_len,
                                       bool causal, int64_t past, const int64_t* past_on_device, const int64_t* bounds,
                                       int64_t segments, float scale) {
  __shared__ float part_max[kSplitWarps], part_sum[kSplitWarps];
  __shared__ float part_acc[kSplitWarps][32 * kMaxPerLane];
  __shared__ float q_scaled[32 * kMaxPerLane];
  const int64_t pair = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = pair / hq, h = pair % hq;
  allow_next_kernel();
  wait_for_previous_kernel();  // q and the cache come from the kernels before
  load_scaled(q_scaled, q + (i * hq + h) * d, d, scale, 0, blockDim.x);
  __syncthreads();
  if (past_on_device) past = *past_on_device, kv_len = past + s;  // a replayed decode step: the current position
  int64_t lo, hi, used_chunks, chunk_keys;
  visible_keys(i, kv_len, causal, past, bounds, segments, lo, hi);
  constexpr int kTile = kTileKeys<kPerLane>;
  chunking<kTile>(hi - lo, chunks, used_chunks, chunk_keys);
  const int64_t first = chunk < used_chunks ? lo + chunk * chunk_keys : hi, last = min(hi, first + chunk_keys);
  SoftmaxState<kPerLane> st;
  warp_attend(st, q_scaled, k, v, hkv, h / (hq / hkv), d, first + kTile * warp, last, kTile * kSplitWarps, lane);
  const int per_lane = int((d + 31) / 32);
  if (lane == 0) {
    part_max[warp] = st.best;
    part_sum[warp] = st.total;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
    if (j < per_lane) part_acc[warp][lane + 32 * j] = st.acc[j];
  __syncthreads();
  if (warp == 0) {  // merge the warps' triples: the output itself, or this chunk's partial
    float block_max = -INFINITY;
    for (int w = 0; w < kSplitWarps; ++w) block_max = fmaxf(block_max, part_max[w]);
    float sum = 0.0f, weights[kSplitWarps];
    for (int w = 0; w < kSplitWarps; ++w) {
      // A warp that saw no key has max -inf and contributes nothing.
      weights[w] = part_max[w] == -INFINITY ? 0.0f : expf(part_max[w] - block_max);
      sum += part_sum[w] * weights[w];
    }
    float* partial = partials + (pair * chunks + chunk) * (d + 2);
    for (int j = 0; j < per_lane; ++j) {
      const int64_t e = lane + 32 * j;
      if (e >= d) continue;
      float value = 0.0f;
      for (int w = 0; w < kSplitWarps; ++w) value += part_acc[w][e] * weights[w];
      if (chunks == 1) out[(i * hq + h) * d + e] = value / sum;
      else partial[2 + e] = value;
    }
    if (chunks > 1 && lane == 0) partial[0] = block_max, partial[1] = sum;
  }
  if (chunks == 1 || !last_to_arrive(&arrivals[pair], unsigned(chunks))) return;
  combine_partials<kSplitWarps, 1>(partials + pair * chunks * (d + 2), out + (i * hq + h) * d, int(d), int(chunks), chunks);
  if (threadIdx.x == 0) arrivals[pair] = 0;
}

// Blocks per pair: enough to fill the GPU twice over, but at least one tile of keys per warp each (for the
// longest key range; each pair uses as many as its own range needs, the rest contribute nothing).
int64_t chunk_count(int64_t pairs, int64_t kv_len, int64_t d, int multiprocessors) {
  const int64_t block_keys = int64_t((d + 31) / 32 > 4 ? kTileKeys<8> : kTileKeys<4>) * kSplitWarps;
  const int64_t wanted = std::min<int64_t>(kMaxChunks, (2 * int64_t(multiprocessors) + pairs - 1) / pairs);
  return std::max<int64_t>(1, std::min(wanted, (kv_len + block_keys - 1) / block_keys));
}

}  // namespace

int64_t attention_split_workspace(const AttentionArgs& a, int multiprocessors) {
  if (attention_decode_fits(a)) return attention_decode_workspace(a, multiprocessors);
  return split_workspace_floats(a.s * a.hq, chunk_count(a.s * a.hq, a.kv_len, a.d, multiprocessors), a.d);
}

void attention(const AttentionArgs& a, const SplitDecode& split, cudaStream_t stream) {
  if (a.d > 32 * kMaxPerLane) throw std::runtime_error("attention: head_dim over 256 is not supported");
  if (a.layout) throw std::runtime_error("attention: a block layout runs in the tiled kernels only");
  if (a.s * a.hq == 0) return;
  if (split.past_on_device && !split.split_keys)
    throw std::runtime_error("attention: a position on the device needs split_keys");
  if (split.split_keys && attention_decode_fits(a)) return attention_decode(a, split, stream);
  // Instantiated for 1, 2, 4 and 8 dimensions a lane (head sizes up to 32, 64, 128 and 256).
  const int64_t per_lane = (a.d + 31) / 32;
  const auto pick = [&](auto kernel1, auto kernel2, auto kernel4, auto kernel8) {
    return per_lane <= 1 ? kernel1 : per_lane <= 2 ? kernel2 : per_lane <= 4 ? kernel4 : kernel8;
  };
  with_kv_type(a.kv_type, [&](auto element) {
    using KV = decltype(element);
    const auto* k = static_cast<const KV*>(a.k);
    const auto* v = static_cast<const KV*>(a.v);
    if (split.split_keys) {
      const int64_t chunks = chunk_count(a.s * a.hq, a.kv_len, a.d, split.multiprocessors);
      launch_kernel(pick(attention_chunk_kernel<1, KV>, attention_chunk_kernel<2, KV>, attention_chunk_kernel<4, KV>,
                         attention_chunk_kernel<8, KV>),
                    dim3(unsigned(chunks), unsigned(a.s * a.hq)), dim3(kSplitWarps * 32), 0, stream, split.overlap, a.q,
                    k, v, a.out, split.workspace, split.arrivals, a.s, a.hq, a.hkv, a.d, a.kv_len, a.causal, a.past,
                    split.past_on_device, a.bounds, a.segments, a.scale);
      return;
    }
    const int warps = 4;
    const auto kernel = pick(attention_kernel<1, KV>, attention_kernel<2, KV>, attention_kernel<4, KV>,
                             attention_kernel<8, KV>);
    kernel<<<unsigned((a.s * a.hq + warps - 1) / warps), warps * 32, 0, stream>>>(
        a.q, k, v, a.out, a.s, a.hq, a.hkv, a.d, a.kv_len, a.causal, a.past, a.bounds, a.segments, a.scale);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace qvl::cuda
