// The unfused attention sequence (attention_unfused.cuh). Plain and f32 arithmetic on purpose (a bf16 cache is
// widened as it is read): it is the reference for the
// fused kernels' speed-up and output difference, not a fast path. One block per (query, head) row of scores.
#include <cfloat>

#include "attention_mask.cuh"
#include "attention_unfused.cuh"
#include "common.cuh"
#include "flash_attention.cuh"  // kFlashLayoutBlock
#include "kv_cache.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 128;

// workspace row (r, h) = P[h, first + r, :], laid out [rows][hq][kv_len].
template <typename KV>
__global__ void scores_kernel(const float* __restrict__ q, const KV* __restrict__ k, float* __restrict__ p,
                              int64_t first, int64_t hq, int64_t hkv, int64_t d, int64_t kv_len, bool causal,
                              int64_t past, const int64_t* __restrict__ bounds, int64_t segments,
                              const int64_t* __restrict__ layout, int64_t layout_side, float scale) {
  extern __shared__ float q_row[];
  const int64_t r = blockIdx.x / hq, h = blockIdx.x % hq, i = first + r, kvh = h / (hq / hkv);
  for (int64_t e = threadIdx.x; e < d; e += kThreads) q_row[e] = q[(i * hq + h) * d + e];
  __syncthreads();
  int64_t lo, hi;
  visible_keys(i, kv_len, causal, past, bounds, segments, lo, hi);
  const int64_t* allowed = layout ? layout + (past + i) / kFlashLayoutBlock * layout_side : nullptr;
  float* row = p + (r * hq + h) * kv_len;
  for (int64_t t = threadIdx.x; t < kv_len; t += kThreads) {
    float dot = -INFINITY;
    if (t >= lo && t < hi && (!allowed || allowed[t / kFlashLayoutBlock])) {
      const KV* key = k + (t * hkv + kvh) * d;
      dot = 0.0f;
      for (int64_t e = 0; e < d; ++e) dot += q_row[e] * load_kv(key + e);
      dot *= scale;
    }
    row[t] = dot;
  }
}

__global__ void softmax_kernel(float* __restrict__ p, int64_t kv_len) {
  float* row = p + int64_t(blockIdx.x) * kv_len;
  float best = -INFINITY;
  for (int64_t t = threadIdx.x; t < kv_len; t += kThreads) best = fmaxf(best, row[t]);
  __shared__ float partial[kThreads / 32];
  best = warp_max(best);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = best;
  __syncthreads();
  for (int w = 0; w < kThreads / 32; ++w) best = fmaxf(best, partial[w]);
  __syncthreads();
  float total = 0.0f;
  for (int64_t t = threadIdx.x; t < kv_len; t += kThreads) {
    const float e = best == -INFINITY ? 0.0f : expf(row[t] - best);  // a row that sees nothing stays 0
    row[t] = e;
    total += e;
  }
  total = block_sum<kThreads>(total);
  const float inverse = total > 0.0f ? 1.0f / total : 0.0f;
  for (int64_t t = threadIdx.x; t < kv_len; t += kThreads) row[t] *= inverse;
}

template <typename KV>
__global__ void weighted_sum_kernel(const float* __restrict__ p, const KV* __restrict__ v, float* __restrict__ out,
                                    int64_t first, int64_t hq, int64_t hkv, int64_t d, int64_t kv_len) {
  const int64_t r = blockIdx.x / hq, h = blockIdx.x % hq, i = first + r, kvh = h / (hq / hkv);
  const float* row = p + (r * hq + h) * kv_len;
  for (int64_t e = threadIdx.x; e < d; e += kThreads) {
    float acc = 0.0f;
    for (int64_t t = 0; t < kv_len; ++t) acc += row[t] * load_kv(v + (t * hkv + kvh) * d + e);  // lanes read adjacent v
    out[(i * hq + h) * d + e] = acc;
  }
}

}  // namespace

void attention_scores(const AttentionArgs& a, int64_t first, int64_t rows, float* workspace, cudaStream_t stream) {
  if (rows * a.hq == 0) return;
  with_kv_type(a.kv_type, [&](auto element) {
    using KV = decltype(element);
    scores_kernel<KV><<<unsigned(rows * a.hq), kThreads, std::size_t(a.d) * sizeof(float), stream>>>(
        a.q, static_cast<const KV*>(a.k), workspace, first, a.hq, a.hkv, a.d, a.kv_len, a.causal, a.past, a.bounds,
        a.segments, a.layout, a.layout_side, a.scale);
    CUDA_CHECK_LAUNCH();
  });
}

void attention_softmax(float* workspace, int64_t rows, int64_t hq, int64_t kv_len, cudaStream_t stream) {
  if (rows * hq == 0) return;
  softmax_kernel<<<unsigned(rows * hq), kThreads, 0, stream>>>(workspace, kv_len);
  CUDA_CHECK_LAUNCH();
}

void attention_weighted_sum(const AttentionArgs& a, int64_t first, int64_t rows, const float* workspace,
                            cudaStream_t stream) {
  if (rows * a.hq == 0) return;
  with_kv_type(a.kv_type, [&](auto element) {
    using KV = decltype(element);
    weighted_sum_kernel<KV><<<unsigned(rows * a.hq), kThreads, 0, stream>>>(
        workspace, static_cast<const KV*>(a.v), a.out, first, a.hq, a.hkv, a.d, a.kv_len);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace qvl::cuda
