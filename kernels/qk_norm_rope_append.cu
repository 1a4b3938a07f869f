// Prefill rows with heads of 64, 128 or 256: a warp per (token, head) of q and of k (the warp kernel below). Decode
// rows and other widths: one block per (token, head) of q and of k; thread t owns the rotate_half pair (t, t + D/2), so
// the norm, the rotation and the writes need no shared memory beyond the norm's sum. Up to D = 256 the sum of squares
// is added up as the plain RMSNorm kernel adds it and RoPE is the plain kernel's rope_rotate, so fused and unfused give
// the same bits.
#include <stdexcept>

#include "common.cuh"
#include "kv_cache.cuh"
#include "profile.h"
#include "qk_norm_rope_append.cuh"

namespace qvl::cuda {
namespace {

// Σ a² + b² over the block's pairs (a: element t, b: element t + half), added up as the plain RMSNorm kernel adds
// a row of up to 256 (one element a thread): each run of 32 consecutive elements by a warp's shuffle tree, then
// those partial sums in order. Wider heads take a plain block sum.
template <int kThreads> __device__ float sum_of_squares(float a, float b, int64_t half) {
  const int64_t d = 2 * half;
  if (d > 256) return block_sum<kThreads>(a * a + b * b);
  __shared__ float squares[256];
  __shared__ float partial[8];
  const int t = threadIdx.x, lane = t % 32, groups = int((d + 31) / 32);
  if (t < half) squares[t] = __fmul_rn(a, a), squares[t + half] = __fmul_rn(b, b);
  __syncthreads();
  for (int g = t / 32; g < groups; g += kThreads / 32) {
    const int64_t e = int64_t(g) * 32 + lane;
    const float sum = warp_sum(e < d ? squares[e] : 0.0f);
    if (lane == 0) partial[g] = sum;
  }
  __syncthreads();
  float total = 0.0f;
  for (int g = 0; g < groups; ++g) total += partial[g];
  return total;
}

// Threads per block: one per pair (64 for the usual D = 128; 256 up to D = 512).
template <int kThreads, typename KV>
__global__ void qk_norm_rope_append_kernel(float* q, float* k, const float* v, const void* q_norm, WeightType qt,
                                           const void* k_norm, WeightType kt, float eps, const float* cos,
                                           const float* sin, KV* cache_k, KV* cache_v, int64_t row,
                                           const int64_t* row_on_device, int64_t hq, int64_t hkv, int64_t d) {
  const int64_t s = blockIdx.x, head = blockIdx.y, half = d / 2, t = threadIdx.x;
  const bool is_q = head < hq;
  const int64_t kv_head = head - hq;
  allow_next_kernel();
  // Before the wait, every load of what no kernel of the pass writes: the norm weights, the angles and the cache
  // position (the last two are copies made before the pass), so that no trip past L2 follows the wait. On an H200
  // (2B, block timeline, 2026-11-29) its time in the chain went 5.4 -> 3.7 µs at 256 tokens of context and 5.9 -> 4.5
  // at 4,096 (alone it is no quicker); decode 657 -> 669 tokens/s at 256 (three rounds, two plugins alternating),
  // level at 4,096.
  const void* w = is_q ? q_norm : k_norm;
  const WeightType wt = is_q ? qt : kt;
  const bool pair = t < half, append = pair && !is_q;
  const float* c = cos + s * d;
  const float* sn = sin + s * d;
  const float wa = pair ? load_weight(w, wt, t) : 0.0f, wb = pair ? load_weight(w, wt, t + half) : 0.0f;
  const float ca = pair ? c[t] : 0.0f, sa = pair ? sn[t] : 0.0f, cb = pair ? c[t + half] : 0.0f,
              sb = pair ? sn[t + half] : 0.0f;
  const int64_t at = append ? (row_on_device ? *row_on_device : row) + s : 0;
  wait_for_previous_kernel();  // q, k and v come from the kernel before
  float* x = is_q ? q + (s * hq + head) * d : k + (s * hkv + kv_head) * d;
  const float* vs = append ? v + (s * hkv + kv_head) * d : v;
  const float a = pair ? x[t] : 0.0f, b = pair ? x[t + half] : 0.0f;
  const float va = append ? vs[t] : 0.0f, vb = append ? vs[t + half] : 0.0f;
  const float inv = rsqrtf(sum_of_squares<kThreads>(a, b, half) / float(d) + eps);
  if (!pair) return;
  const float na = wa * (a * inv), nb = wb * (b * inv);
  float ra, rb;
  rope_rotate(na, nb, ca, sa, cb, sb, ra, rb);
  x[t] = ra;
  x[t + half] = rb;
  if (is_q) return;
  KV* ck = cache_k + (at * hkv + kv_head) * d;
  KV* cv = cache_v + (at * hkv + kv_head) * d;
  store_kv(ck + t, ra);
  store_kv(ck + t + half, rb);
  store_kv(cv + t, va);
  store_kv(cv + t + half, vb);
}

// Heads of D = 32·kPerLane (64, 128, 256): a warp a (token, head), eight a block. Lane l holds elements l + 32·j;
// the rotate_half pairs are (j, j + kPerLane/2). A block a head (above) ran 12,288 blocks of 64 threads at a 512-token
// prefill, each waiting on two barriers and then on its weight and rotary loads one after another: 15.8 µs for about
// 13 MB (H100 timeline). Here every load is issued before the first store and the sums are shuffles; Σ x² is added up
// as the plain RMSNorm adds a row (each run of 32 elements by warp_sum, whose butterfly leaves every lane the same
// total, then those sums in order), so the bits are the block kernel's and the unfused sequence's.
template <int kPerLane, typename KV>
__global__ void __launch_bounds__(256)
    qk_norm_rope_append_warp_kernel(const float* q, float* k, const float* __restrict__ v,
                                    const void* __restrict__ q_norm, WeightType qt, const void* __restrict__ k_norm,
                                    WeightType kt, float eps, const float* __restrict__ cos,
                                    const float* __restrict__ sin, KV* __restrict__ cache_k, KV* __restrict__ cache_v,
                                    int64_t row, const int64_t* row_on_device, int64_t s_count, int64_t hq,
                                    int64_t hkv, int64_t q_stride, int64_t kv_stride, float* q_out) {
  constexpr int kHalf = kPerLane / 2, d = 32 * kPerLane;
  const int64_t item = int64_t(blockIdx.x) * 8 + threadIdx.x / 32, heads = hq + hkv;
  const int lane = threadIdx.x % 32;
  allow_next_kernel();
  if (item >= s_count * heads) return;
  const int64_t s = item / heads, head = item % heads, kv_head = head - hq;
  const bool is_q = head < hq;
  const void* w = is_q ? q_norm : k_norm;
  const WeightType wt = is_q ? qt : kt;
  const float* c = cos + s * d;
  const float* sn = sin + s * d;
  float e[kPerLane], ws[kPerLane], cs[kPerLane], ss[kPerLane], vv[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {  // before the wait: weights and angles, which no kernel of the pass writes
    const int i = lane + 32 * j;
    ws[j] = load_weight(w, wt, i), cs[j] = c[i], ss[j] = sn[i];
  }
  wait_for_previous_kernel();  // q, k and v come from the kernel before
  const float* x = is_q ? q + s * q_stride + head * d : k + s * kv_stride + kv_head * d;
  float* y = is_q ? q_out + (s * hq + head) * d : k + s * kv_stride + kv_head * d;
  const float* vs = v + s * kv_stride + kv_head * d;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    e[j] = x[i];
    vv[j] = is_q ? 0.0f : vs[i];
  }
  float total = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) total += warp_sum(__fmul_rn(e[j], e[j]));
  const float inv = rsqrtf(total / float(d) + eps);
  float r[kPerLane];
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    const float na = ws[j] * (e[j] * inv), nb = ws[j + kHalf] * (e[j + kHalf] * inv);
    rope_rotate(na, nb, cs[j], ss[j], cs[j + kHalf], ss[j + kHalf], r[j], r[j + kHalf]);
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) y[lane + 32 * j] = r[j];
  if (is_q) return;
  const int64_t at = (row_on_device ? *row_on_device : row) + s;
  KV* ck = cache_k + (at * hkv + kv_head) * d;
  KV* cv = cache_v + (at * hkv + kv_head) * d;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) store_kv(ck + lane + 32 * j, r[j]), store_kv(cv + lane + 32 * j, vv[j]);
}

// Decode rows: the profiles' GEMV rows (both profiles take the same).
static_assert(kSm61Profile.gemv_max_rows == kNativeProfile.gemv_max_rows);
constexpr int64_t kMaxDecodeRows = kNativeProfile.gemv_max_rows;

}  // namespace

bool qk_norm_rope_append_strided(const QkNormRopeAppendArgs& a) {
  return a.s > kMaxDecodeRows && (a.d == 64 || a.d == 128 || a.d == 256);
}

void qk_norm_rope_append(const QkNormRopeAppendArgs& a, bool overlap, cudaStream_t stream) {
  if (a.s == 0) return;
  const bool strided = a.q_stride || a.kv_stride || a.q_out;
  if (strided && !qk_norm_rope_append_strided(a))
    throw std::runtime_error("qk_norm_rope_append: strided rows and q_out are for prefill rows of heads of 64-256");
  with_kv_type(a.kv_bf16, [&](auto element) {
    using KV = decltype(element);
    // Decode rows keep a block a head: three 8-warp blocks for a step's 24 heads made the 2B's decode step 10 µs
    // longer than 24 blocks did (1.825 -> 1.835 ms, H100 timeline of a picture + 40 tokens).
    if (qk_norm_rope_append_strided(a)) {
      const auto kernel = a.d == 64    ? qk_norm_rope_append_warp_kernel<2, KV>
                          : a.d == 128 ? qk_norm_rope_append_warp_kernel<4, KV>
                                       : qk_norm_rope_append_warp_kernel<8, KV>;
      const dim3 grid(unsigned((a.s * (a.hq + a.hkv) + 7) / 8));
      launch_kernel(kernel, grid, dim3(256), 0, stream, overlap, static_cast<const float*>(a.q), a.k, a.v, a.q_norm,
                    a.q_norm_type, a.k_norm, a.k_norm_type, a.eps, a.cos, a.sin, static_cast<KV*>(a.cache_k),
                    static_cast<KV*>(a.cache_v), a.row, a.row_on_device, a.s, a.hq, a.hkv,
                    a.q_stride ? a.q_stride : a.hq * a.d, a.kv_stride ? a.kv_stride : a.hkv * a.d,
                    a.q_out ? a.q_out : a.q);
      return;
    }
    const dim3 grid(unsigned(a.s), unsigned(a.hq + a.hkv));
    launch_kernel(a.d <= 128 ? qk_norm_rope_append_kernel<64, KV> : qk_norm_rope_append_kernel<256, KV>, grid,
                  dim3(a.d <= 128 ? 64 : 256), 0, stream, overlap, a.q, a.k, a.v, a.q_norm, a.q_norm_type, a.k_norm,
                  a.k_norm_type, a.eps, a.cos, a.sin, static_cast<KV*>(a.cache_k), static_cast<KV*>(a.cache_v), a.row,
                  a.row_on_device, a.hq, a.hkv, a.d);
  });
}

}  // namespace qvl::cuda
