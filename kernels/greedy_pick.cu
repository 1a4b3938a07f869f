// Greedy decoding's pick: the first index of the largest logit, and a NaN flag.
//
// The row (the 2B model's 151,936 logits, 608 KB) lies in L2 behind the output head that wrote it, so the pick is a
// read of L2 and the question is how many SMs ask. One block over the whole row took 32 µs (Nsight Compute, H200,
// base clocks: one SM's share of L2 bandwidth, ~20 GB/s there); here a block takes 2,048 values (8 loads a thread,
// all issued before any is compared), ~75 blocks for the 2B's vocabulary, and the last block to finish merges the
// blocks' picks (pick_merge.cuh), so it stays one launch.
// Launched overlapped, it waits before reading the logits; it never lets the next kernel start early: it ends a
// decode step's work (a recording closes with a plain kernel after it, barrier.cuh's or the step's hand-off).
#include "greedy_pick.cuh"

#include <algorithm>

#include "common.cuh"
#include "pick_merge.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256, kPerThread = 8, kChunk = kThreads * kPerThread;
constexpr int kMaxBlocks = kMaxPickBlocks<kThreads>;

__global__ void __launch_bounds__(kThreads) greedy_pick_kernel(GreedyPickArgs a) {
  wait_for_previous_kernel();
  PickBest best{-INFINITY, 0, a.count};
  for (int64_t base = int64_t(blockIdx.x) * kChunk + threadIdx.x; base < a.count; base += int64_t(gridDim.x) * kChunk) {
    float v[kPerThread];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int64_t i = base + int64_t(u) * kThreads;
      v[u] = i < a.count ? a.logits[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) take_value(best, v[u], base + int64_t(u) * kThreads);
  }
  merge_block_picks<kThreads>(best, a.count, a.workspace, a.pick);
}

}  // namespace

int64_t greedy_pick_workspace_bytes() { return pick_merge_workspace_bytes<kThreads>(); }

void greedy_pick(const GreedyPickArgs& args, bool overlap, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, (args.count + kChunk - 1) / kChunk);
  launch_kernel(greedy_pick_kernel, dim3(unsigned(std::max<int64_t>(1, blocks))), dim3(kThreads), 0, stream, overlap,
                args);
}

}  // namespace qvl::cuda
