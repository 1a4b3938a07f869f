#pragma once
// The first index of a row's largest value across the blocks of one launch, and a NaN flag: each block's threads
// keep the largest value they saw and its first index, the block keeps its best (block_best), and the last block to
// finish (split_merge.cuh's arrival counter) merges the blocks' bests into pick[0] and pick[1] (merge_block_picks).
// Merges keep the larger value, the smaller index where they are equal, so the result is the first index of the
// maximum whatever the order of the merges; NaN compares false and is only flagged. Used by the greedy pick over a
// row of logits (greedy_pick.cu) and by the output head's bounded pick over its candidates (head_bounds.cu).
#include <cstdint>

#include "split_merge.cuh"

namespace qvl::cuda {

struct PickBest {
  float value;  // -inf, index `count`: nothing above -inf seen yet
  int nan;
  int64_t index;
};

__device__ __forceinline__ PickBest better(PickBest a, PickBest b) {
  const bool take = b.value > a.value || (b.value == a.value && b.index < a.index);
  return {take ? b.value : a.value, a.nan | b.nan, take ? b.index : a.index};
}

// `value` at `index` taken into `best` (a thread's own values in rising index order: a later equal value never
// replaces the kept one).
__device__ __forceinline__ void take_value(PickBest& best, float value, int64_t index) {
  best.nan |= isnan(value) ? 1 : 0;
  if (value > best.value) best.value = value, best.index = index;
}

// The block's best in thread 0.
template <int kThreads>
__device__ __forceinline__ PickBest block_best(PickBest best) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const PickBest other{__shfl_xor_sync(0xffffffffu, best.value, offset),
                         __shfl_xor_sync(0xffffffffu, best.nan, offset),
                         __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  __shared__ PickBest warps[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kThreads / 32; ++w) best = better(best, warps[w]);
  return best;
}

// Blocks a launch may merge: the merging block reads one block's best a thread.
template <int kThreads>
constexpr int kMaxPickBlocks = kThreads;

// Bytes of workspace merge_block_picks needs (zeroed once by the caller; every launch leaves it zeroed again).
template <int kThreads>
constexpr int64_t pick_merge_workspace_bytes() {
  return int64_t(sizeof(PickBest)) * kMaxPickBlocks<kThreads> + 16;
}

// The block's best (every thread calls this with its own) written for the merge; the last block to arrive writes
// pick[0] = the first index of the largest value (0 where nothing was above -inf: every value -inf or NaN) and
// pick[1] = 1 if any value was NaN. gridDim.x <= kMaxPickBlocks.
template <int kThreads>
__device__ void merge_block_picks(PickBest best, int64_t count, void* workspace, int64_t* pick) {
  PickBest* const partials = static_cast<PickBest*>(workspace);
  unsigned* const arrivals = reinterpret_cast<unsigned*>(partials + kMaxPickBlocks<kThreads>);
  best = block_best<kThreads>(best);
  if (threadIdx.x == 0) partials[blockIdx.x] = best;
  // (last_to_arrive's barrier also keeps the merge's block_best from writing `warps` before thread 0 has read it.)
  if (!last_to_arrive(arrivals, gridDim.x)) return;
  best = {-INFINITY, 0, count};
  if (threadIdx.x < gridDim.x) {  // written by other blocks: from L2, past any stale L1 line
    const PickBest* const p = partials + threadIdx.x;
    best = {__ldcg(&p->value), __ldcg(&p->nan), __ldcg(reinterpret_cast<const long long*>(&p->index))};
  }
  best = block_best<kThreads>(best);
  if (threadIdx.x != 0) return;
  pick[0] = best.index == count ? 0 : best.index;
  pick[1] = best.nan;
  *arrivals = 0;
}

}  // namespace qvl::cuda
