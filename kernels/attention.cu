// Online-softmax attention (no score matrix is stored, any length works); each lane owns D/32 dimensions (D <= 256).
// Two shapes of the same algorithm, for what the tiled flash kernel (flash_attention.cu) does not take:
// - few (query, head) pairs (decode: one query x heads): a block of kSplitWarps warps per pair, each warp taking
//   every kSplitWarps-th key, the partial (max, sum, accumulator) triples merged through shared memory (16 KB at
//   D = 256, inside Pascal's 48 KB). One warp per head would leave all but 16 warps of a GPU idle while reading the
//   cache, which is the decode step's only traffic here: 2·T·Hkv·D·4 bytes, read once.
// - otherwise (a few queries, or head sizes the flash kernel does not take): one warp per pair, reading every key
//   and value once per query.
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

constexpr int kSplitWarps = 16;

__global__ void attention_split_kernel(const float* q, const float* k, const float* v, float* out, int64_t hq,
                                       int64_t hkv, int64_t d, int64_t kv_len, bool causal, int64_t past,
                                       const int64_t* bounds, int64_t segments, float scale) {
  __shared__ float part_max[kSplitWarps], part_sum[kSplitWarps];
  __shared__ float part_acc[kSplitWarps][32 * kMaxPerLane];
  const int64_t task = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = task / hq, h = task % hq;
  int64_t lo, hi;
  visible_keys(i, kv_len, causal, past, bounds, segments, lo, hi);
  const SoftmaxState st =
      warp_attend(q + (i * hq + h) * d, k, v, hkv, h / (hq / hkv), d, scale, lo + warp, hi, kSplitWarps, lane);
  const int per_lane = int((d + 31) / 32);
  if (lane == 0) {
    part_max[warp] = st.best;
    part_sum[warp] = st.total;
  }
  for (int j = 0; j < per_lane; ++j) part_acc[warp][lane + 32 * j] = st.acc[j];
  __syncthreads();
  if (warp != 0) return;
  float global_max = -INFINITY;
  for (int w = 0; w < kSplitWarps; ++w) global_max = fmaxf(global_max, part_max[w]);
  float sum = 0.0f;
  float weights[kSplitWarps];
  for (int w = 0; w < kSplitWarps; ++w) {
    // A warp that saw no key has max -inf and contributes nothing.
    weights[w] = part_max[w] == -INFINITY ? 0.0f : expf(part_max[w] - global_max);
    sum += part_sum[w] * weights[w];
  }
  for (int j = 0; j < per_lane; ++j) {
    const int64_t e = lane + 32 * j;
    if (e >= d) continue;
    float value = 0.0f;
    for (int w = 0; w < kSplitWarps; ++w) value += part_acc[w][e] * weights[w];
    out[(i * hq + h) * d + e] = value / sum;
  }
}

}  // namespace

void attention(const float* q, const float* k, const float* v, float* out, int64_t s, int64_t hq, int64_t hkv, int64_t d,
               int64_t kv_len, bool causal, int64_t past, const int64_t* bounds, int64_t segments, float scale,
               bool split_keys, cudaStream_t stream) {
  if (d > 32 * kMaxPerLane) throw std::runtime_error("attention: head_dim over 256 is not supported");
  if (s * hq == 0) return;
  if (split_keys) {
    attention_split_kernel<<<unsigned(s * hq), kSplitWarps * 32, 0, stream>>>(q, k, v, out, hq, hkv, d, kv_len, causal,
                                                                             past, bounds, segments, scale);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int warps = 4;
  attention_kernel<<<unsigned((s * hq + warps - 1) / warps), warps * 32, 0, stream>>>(q, k, v, out, s, hq, hkv, d, kv_len,
                                                                                   causal, past, bounds, segments, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
