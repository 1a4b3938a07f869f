// Greedy decoding's pick: the first index of the largest logit, and a NaN flag.
//
// The row (the 2B model's 151,936 logits, 608 KB) lies in L2 behind the output head that wrote it, so the pick is a
// read of L2 and the question is how many SMs ask. One block over the whole row took 32 µs (Nsight Compute, H200,
// base clocks: one SM's share of L2 bandwidth, ~20 GB/s there); here a block takes 2,048 values (8 loads a thread,
// all issued before any is compared), ~75 blocks for the 2B's vocabulary, and the last block to finish merges the
// blocks' picks (split_merge.cuh's arrival counter), so it stays one launch. Each thread keeps the largest value it
// saw and its first index; merges keep the larger value, the smaller index where they are equal, so the result is the
// first index of the maximum whatever the order of the merges. NaN compares false and is only flagged.
// Launched overlapped, it waits before reading the logits; it never lets the next kernel start early: it ends a
// decode step's work (a recording closes with a plain kernel after it, barrier.cuh's or the step's hand-off).
#include "greedy_pick.cuh"

#include <algorithm>

#include "common.cuh"
#include "split_merge.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256, kPerThread = 8, kChunk = kThreads * kPerThread;
constexpr int kMaxBlocks = kThreads;  // the merging block reads one partial a thread
static_assert(kMaxBlocks <= kThreads, "the merge reads one block's pick a thread");

struct Best {
  float value;    // -inf, index `count`: nothing above -inf seen yet
  int nan;
  int64_t index;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  const bool take = b.value > a.value || (b.value == a.value && b.index < a.index);
  return {take ? b.value : a.value, a.nan | b.nan, take ? b.index : a.index};
}

// The block's best in thread 0.
__device__ __forceinline__ Best block_best(Best best) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset), __shfl_xor_sync(0xffffffffu, best.nan, offset),
                     __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  __shared__ Best warps[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kThreads / 32; ++w) best = better(best, warps[w]);
  return best;
}

__global__ void __launch_bounds__(kThreads) greedy_pick_kernel(GreedyPickArgs a) {
  Best* const partials = static_cast<Best*>(a.workspace);
  unsigned* const arrivals = reinterpret_cast<unsigned*>(partials + kMaxBlocks);
  wait_for_previous_kernel();
  Best best{-INFINITY, 0, a.count};
  for (int64_t base = int64_t(blockIdx.x) * kChunk + threadIdx.x; base < a.count; base += int64_t(gridDim.x) * kChunk) {
    float v[kPerThread];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int64_t i = base + int64_t(u) * kThreads;
      v[u] = i < a.count ? a.logits[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {  // indices rise with u: a later equal value never replaces the kept one
      best.nan |= isnan(v[u]) ? 1 : 0;
      if (v[u] > best.value) best.value = v[u], best.index = base + int64_t(u) * kThreads;
    }
  }
  best = block_best(best);
  if (threadIdx.x == 0) partials[blockIdx.x] = best;
  // (last_to_arrive's barrier also keeps the merge's block_best from writing `warps` before thread 0 has read it.)
  if (!last_to_arrive(arrivals, gridDim.x)) return;
  best = {-INFINITY, 0, a.count};
  if (threadIdx.x < gridDim.x) {  // written by other blocks: from L2, past any stale L1 line
    const Best* const p = partials + threadIdx.x;
    best = {__ldcg(&p->value), __ldcg(&p->nan), __ldcg(reinterpret_cast<const long long*>(&p->index))};
  }
  best = block_best(best);
  if (threadIdx.x != 0) return;
  a.pick[0] = best.index == a.count ? 0 : best.index;  // every value -inf (or NaN): the first
  a.pick[1] = best.nan;
  *arrivals = 0;
}

}  // namespace

int64_t greedy_pick_workspace_bytes() { return int64_t(sizeof(Best)) * kMaxBlocks + 16; }

void greedy_pick(const GreedyPickArgs& args, bool overlap, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, (args.count + kChunk - 1) / kChunk);
  launch_kernel(greedy_pick_kernel, dim3(unsigned(std::max<int64_t>(1, blocks))), dim3(kThreads), 0, stream, overlap,
                args);
}

}  // namespace qvl::cuda
