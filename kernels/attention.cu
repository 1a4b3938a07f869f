// Online-softmax attention (no score matrix is stored, any length works); each lane owns D/32 dimensions (D <= 256).
// Two shapes of the same algorithm, for what the tiled flash kernel (flash_attention.cu) does not take:
// - few (query, head) pairs (decode: one query x heads): split-K over the cache. The keys are cut into chunks so
//   that chunks x pairs fill the GPU twice; a block of 4 warps takes one chunk of one pair (each warp every 4th key),
//   merges its warps' (max, sum, accumulator) triples in shared memory (4 KB at D = 256) and writes them as a
//   partial; a second small kernel merges the partials. One block per head would use 16 of 132 SMs of an H100
//   while reading the cache, which is the decode step's only traffic here: 2·T·Hkv·D·4 bytes, read once.
// - otherwise (a few queries, or head sizes the flash kernel does not take): one warp per pair, reading every key
//   and value once per query.
#include <algorithm>

#include "attention.cuh"
#include "common.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kMaxPerLane = 8;  // D <= 256

// Keys [lo, hi) that query i may see.
__device__ void visible_keys(int64_t i, int64_t kv_len, bool causal, int64_t past, const int64_t* bounds,
                             int64_t segments, int64_t& lo, int64_t& hi) {
  lo = 0;
  hi = kv_len;
  if (causal) {
    hi = min(kv_len, past + i + 1);
    return;
  }
  int64_t seg = 0;
  while (seg + 1 < segments && bounds[seg + 1] <= i) ++seg;
  lo = bounds[seg];
  hi = bounds[seg + 1];
}

// One warp's online softmax over keys first, first + step, ... < hi: running max, sum and weighted values.
struct SoftmaxState {
  float best = -INFINITY, total = 0.0f;
  float acc[kMaxPerLane] = {};
};
__device__ SoftmaxState warp_attend(const float* q_row, const float* k, const float* v, int64_t hkv, int64_t kvh,
                                    int64_t d, float scale, int64_t first, int64_t hi, int64_t step, int lane) {
  const int per_lane = int((d + 31) / 32);
  float qv[kMaxPerLane];
  for (int j = 0; j < per_lane; ++j) {
    const int64_t e = lane + 32 * j;
    qv[j] = e < d ? q_row[e] * scale : 0.0f;
  }
  SoftmaxState st;
  for (int64_t t = first; t < hi; t += step) {
    const float* kt = k + (t * hkv + kvh) * d;
    float dot = 0.0f;
    for (int j = 0; j < per_lane; ++j) {
      const int64_t e = lane + 32 * j;
      if (e < d) dot += qv[j] * kt[e];
    }
    dot = warp_sum(dot);
    const float next_best = fmaxf(st.best, dot);
    const float correction = expf(st.best - next_best), p = expf(dot - next_best);
    st.total = st.total * correction + p;
    const float* vt = v + (t * hkv + kvh) * d;
    for (int j = 0; j < per_lane; ++j) {
      const int64_t e = lane + 32 * j;
      st.acc[j] = st.acc[j] * correction + (e < d ? p * vt[e] : 0.0f);
    }
    st.best = next_best;
  }
  return st;
}

__global__ void attention_kernel(const float* q, const float* k, const float* v, float* out, int64_t s, int64_t hq,
                                 int64_t hkv, int64_t d, int64_t kv_len, bool causal, int64_t past, const int64_t* bounds,
                                 int64_t segments, float scale) {
  const int64_t task = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (task >= s * hq) return;
  const int64_t i = task / hq, h = task % hq;
  int64_t lo, hi;
  visible_keys(i, kv_len, causal, past, bounds, segments, lo, hi);
  const SoftmaxState st = warp_attend(q + (i * hq + h) * d, k, v, hkv, h / (hq / hkv), d, scale, lo, hi, 1, lane);
  for (int j = 0; j < int((d + 31) / 32); ++j) {
    const int64_t e = lane + 32 * j;
    if (e < d) out[(i * hq + h) * d + e] = st.acc[j] / st.total;
  }
}

constexpr int kSplitWarps = 4;

// One block per (chunk of keys, query-head pair): its warps take every kSplitWarps-th key of the chunk; the warps'
// (max, sum, accumulator) triples are merged in shared memory and written as the chunk's partial result, or, when
// there is a single chunk, as the output itself.
__global__ void attention_chunk_kernel(const float* q, const float* k, const float* v, float* out, float* partials,
                                       int64_t hq, int64_t hkv, int64_t d, int64_t kv_len, bool causal, int64_t past,
                                       const int64_t* bounds, int64_t segments, float scale, int64_t chunk_keys) {
  __shared__ float part_max[kSplitWarps], part_sum[kSplitWarps];
  __shared__ float part_acc[kSplitWarps][32 * kMaxPerLane];
  const int64_t pair = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = pair / hq, h = pair % hq;
  int64_t lo, hi;
  visible_keys(i, kv_len, causal, past, bounds, segments, lo, hi);
  const int64_t first = lo + chunk * chunk_keys, last = min(hi, first + chunk_keys);
  const SoftmaxState st =
      warp_attend(q + (i * hq + h) * d, k, v, hkv, h / (hq / hkv), d, scale, first + warp, last, kSplitWarps, lane);
  const int per_lane = int((d + 31) / 32);
  if (lane == 0) {
    part_max[warp] = st.best;
    part_sum[warp] = st.total;
  }
  for (int j = 0; j < per_lane; ++j) part_acc[warp][lane + 32 * j] = st.acc[j];
  __syncthreads();
  if (warp != 0) return;
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

// Merges the chunks' partial results of one pair (the same rescaling as the online softmax).
__global__ void attention_combine_kernel(const float* partials, float* out, int64_t d, int64_t chunks) {
  const int64_t pair = blockIdx.x;
  const float* p = partials + pair * chunks * (d + 2);
  float best = -INFINITY;
  for (int64_t c = 0; c < chunks; ++c) best = fmaxf(best, p[c * (d + 2)]);
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c)
    if (p[c * (d + 2)] != -INFINITY) sum += p[c * (d + 2) + 1] * expf(p[c * (d + 2)] - best);
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    float value = 0.0f;
    for (int64_t c = 0; c < chunks; ++c)
      if (p[c * (d + 2)] != -INFINITY) value += p[c * (d + 2) + 2 + e] * expf(p[c * (d + 2)] - best);
    out[pair * d + e] = value / sum;
  }
}

// Enough chunks that the blocks fill the GPU twice over, but at least 32 keys each.
int64_t chunk_count(int64_t pairs, int64_t kv_len, int multiprocessors) {
  const int64_t wanted = (2 * int64_t(multiprocessors) + pairs - 1) / pairs;
  return std::max<int64_t>(1, std::min(wanted, (kv_len + 31) / 32));
}

}  // namespace

int64_t attention_split_workspace(int64_t s, int64_t hq, int64_t d, int64_t kv_len, int multiprocessors) {
  const int64_t chunks = chunk_count(s * hq, kv_len, multiprocessors);
  return chunks > 1 ? s * hq * chunks * (d + 2) : 0;
}

void attention(const float* q, const float* k, const float* v, float* out, int64_t s, int64_t hq, int64_t hkv, int64_t d,
               int64_t kv_len, bool causal, int64_t past, const int64_t* bounds, int64_t segments, float scale,
               bool split_keys, float* split_workspace, int multiprocessors, cudaStream_t stream) {
  if (d > 32 * kMaxPerLane) throw std::runtime_error("attention: head_dim over 256 is not supported");
  if (s * hq == 0) return;
  if (split_keys) {
    const int64_t chunks = chunk_count(s * hq, kv_len, multiprocessors);
    // Causal decode sees at most kv_len keys; chunk_keys covers them all (segments: at most kv_len too).
    const int64_t chunk_keys = (kv_len + chunks - 1) / chunks;
    attention_chunk_kernel<<<dim3(unsigned(chunks), unsigned(s * hq)), kSplitWarps * 32, 0, stream>>>(
        q, k, v, out, split_workspace, hq, hkv, d, kv_len, causal, past, bounds, segments, scale, chunk_keys);
    CUDA_CHECK_LAUNCH();
    if (chunks > 1) {
      attention_combine_kernel<<<unsigned(s * hq), 128, 0, stream>>>(split_workspace, out, d, chunks);
      CUDA_CHECK_LAUNCH();
    }
    return;
  }
  const int warps = 4;
  attention_kernel<<<unsigned((s * hq + warps - 1) / warps), warps * 32, 0, stream>>>(q, k, v, out, s, hq, hkv, d, kv_len,
                                                                                   causal, past, bounds, segments, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
