// Sampling's top-p and draw: core/top_k.h's draw_from_candidates step for step, so the device draws the token the
// host's sampler draws from the same candidates and state (exp's last bit aside: the host checks every draw).
//
// Why on the device: a sampled decode step otherwise ends with the host reading the candidates, drawing and writing
// the token back before the next step may start: on the H200 ~85 µs a step more than greedy decoding, which queues the
// next step behind the pick on the device (docs/performance.md). The work is tiny (top-k's 20 candidates by default,
// 128 at most): one block of 128 threads, a candidate a thread. Each thread finds its candidate's rank by likelihood
// (128 comparisons, side by side); thread 0 then adds the masses in the reference's order (in id order for the total,
// in rank order for top-p), draws and walks, ~n dependent double additions three times through shared memory:
// 9.2 µs alone with its launch on the H200 (perf mode), where the host's round trip was tens.
#include "draw_from_candidates.cuh"

#include <cmath>

#include "common.cuh"
#include "top_k_candidates.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = kTopKMaxCandidates;  // a candidate a thread
static_assert(kThreads == 4 * 32, "the largest value is merged over four warps");

__device__ __forceinline__ double next_uniform(uint64_t& state) {  // core/top_k.cpp's splitmix64
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return double((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

__global__ void __launch_bounds__(kThreads) draw_from_candidates_kernel(DrawFromCandidatesArgs a) {
  __shared__ double p[kThreads];
  __shared__ int32_t id[kThreads];
  __shared__ int rank[kThreads], by_rank[kThreads];
  __shared__ float warp_best[kThreads / 32];
  wait_for_previous_kernel();
  const int64_t n = a.candidates[0];
  const int t = int(threadIdx.x);
  if (n <= 0 || n > kThreads || a.candidates[1] != 0) {  // nothing to draw from here (0 candidates: id 0, no draw)
    if (t == 0) *a.drawn = 0;
    return;
  }
  float v = -INFINITY;
  if (t < n) {
    v = __uint_as_float(uint32_t(a.candidates[3 + 2 * t]));
    id[t] = int32_t(a.candidates[2 + 2 * t]);
  }
  float best = v;  // the largest value (no NaN here: the flag above)
  for (int offset = 16; offset > 0; offset >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, offset));
  if (t % 32 == 0) warp_best[t / 32] = best;
  __syncthreads();
  best = fmaxf(fmaxf(warp_best[0], warp_best[1]), fmaxf(warp_best[2], warp_best[3]));
  if (t < n) p[t] = v == best ? 1.0 : exp(double(v) - double(best));  // core/top_k.h's likelihood
  __syncthreads();
  if (a.top_p < 1.0 && t < n) {
    int r = 0;
    for (int j = 0; j < n; ++j) r += p[j] > p[t] || (p[j] == p[t] && id[j] < id[t]);
    rank[t] = r;
    by_rank[r] = t;
  }
  __syncthreads();
  if (t != 0) return;
  double total = 0;
  for (int i = 0; i < n; ++i) total += p[i];
  int kept_ranks = int(n);
  if (a.top_p < 1.0) {
    const double keep_mass = a.top_p * total;
    double before = 0;
    for (int r = 0; r < n; ++r) {
      if (before + p[by_rank[r]] >= keep_mass) {
        kept_ranks = r + 1;
        break;
      }
      before += p[by_rank[r]];
    }
    total = 0;
    for (int i = 0; i < n; ++i)
      if (rank[i] < kept_ranks) total += p[i];
  }
  uint64_t state = *a.state;
  double point = __dmul_rn(next_uniform(state), total);  // not fused with the first subtraction: the host's rounding
  int32_t last = 0;
  for (int i = 0; i < n; ++i) {
    if (kept_ranks < n && rank[i] >= kept_ranks) continue;
    last = id[i];
    if ((point -= p[i]) < 0) break;
  }
  *a.drawn = last;
  *a.state = state;
}

}  // namespace

void draw_from_candidates(const DrawFromCandidatesArgs& args, bool overlap, cudaStream_t stream) {
  launch_kernel(draw_from_candidates_kernel, dim3(1), dim3(kThreads), 0, stream, overlap, args);
}

}  // namespace qvl::cuda
