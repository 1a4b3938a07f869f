#pragma once
// Sampling's top-p and draw on the device, at the end of top_k_candidates.cu's last block: core/top_k.h's
// draw_from_candidates step for step, so the device draws the token the host's sampler draws from the same
// candidates and state (exp's last bit aside: the host checks every draw), and a decode step queued after this one
// can embed it (TextDecoder::queue_step) instead of waiting for the host.
//
// The work is tiny (top-k's 20 candidates by default, 128 at most): a thread a candidate finds its rank by
// likelihood (n comparisons, side by side); thread 0 then adds the masses in the reference's order (id order for the
// total, rank order for top-p), draws and walks: ~n dependent double additions three times, in shared memory. As its
// own launch after top-k it took 9.2 µs on the H200 (perf mode, launch included), most of it the launch and the trip
// of the candidates through memory; here the candidates are already in shared memory.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "top_k_candidates.cuh"

namespace qvl::cuda {

__device__ __forceinline__ double next_uniform(uint64_t& state) {  // core/top_k.cpp's splitmix64
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return double((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

struct DrawScratch {
  double p[kTopKMaxCandidates], p_by_rank[kTopKMaxCandidates];
  int rank[kTopKMaxCandidates];
  float warp_best[kTopKMaxCandidates / 32];
};

// Every thread of a block of at least kTopKMaxCandidates threads, whole warps, calls it (it has barriers and
// full-warp shuffles). value[i], id[i]: the
// 0 < n <= kTopKMaxCandidates candidates in id order, in shared memory. Thread 0 writes the id to *drawn and advances
// *state (by skipped + 1 random numbers: `skipped` is FaultInjection::draws_one_late's).
__device__ inline void draw_from_candidates(const float* value, const int32_t* id, int n, double top_p, int skipped,
                                            uint64_t* state, int64_t* drawn, DrawScratch& s) {
  const int t = int(threadIdx.x);
  const bool mine = t < n;
  const float v = mine ? value[t] : -INFINITY;
  float best = v;  // the largest value (no NaN here: the caller draws only where none was seen)
  for (int offset = 16; offset > 0; offset >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, offset));
  if (t < kTopKMaxCandidates && t % 32 == 0) s.warp_best[t / 32] = best;
  __syncthreads();
  best = s.warp_best[0];
#pragma unroll
  for (int w = 1; w < kTopKMaxCandidates / 32; ++w) best = fmaxf(best, s.warp_best[w]);
  if (mine) s.p[t] = v == best ? 1.0 : exp(double(v) - double(best));  // core/top_k.h's likelihood
  __syncthreads();
  if (top_p < 1.0 && mine) {
    int r = 0;
    for (int j = 0; j < n; ++j) r += s.p[j] > s.p[t] || (s.p[j] == s.p[t] && id[j] < id[t]);
    s.rank[t] = r;
    s.p_by_rank[r] = s.p[t];
  }
  __syncthreads();
  if (t != 0) return;
  // Thread 0's chains of additions read shared memory a few values ahead (unrolled): the additions, not the reads,
  // set their pace.
  double total = 0;
#pragma unroll 4
  for (int i = 0; i < n; ++i) total += s.p[i];
  int kept_ranks = n;
  if (top_p < 1.0) {
    const double keep_mass = top_p * total;
    double before = 0;
#pragma unroll 4
    for (int r = 0; r < n; ++r) {
      if (before + s.p_by_rank[r] >= keep_mass) {
        kept_ranks = r + 1;
        break;
      }
      before += s.p_by_rank[r];
    }
    total = 0;
#pragma unroll 4
    for (int i = 0; i < n; ++i)
      if (s.rank[i] < kept_ranks) total += s.p[i];
  }
  uint64_t at = *state;
  for (int i = 0; i < skipped; ++i) next_uniform(at);
  double point = __dmul_rn(next_uniform(at), total);  // not fused with the first subtraction: the host's rounding
  int32_t last = 0;
#pragma unroll 4
  for (int i = 0; i < n; ++i) {
    if (kept_ranks < n && s.rank[i] >= kept_ranks) continue;
    last = id[i];
    if ((point -= s.p[i]) < 0) break;
  }
  *drawn = last;
  *state = at;
}

}  // namespace qvl::cuda
