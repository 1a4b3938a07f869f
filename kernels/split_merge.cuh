#pragma once
// The end of a split over the keys (flash-decoding: attention.cu's and attention_decode.cu's split kernels): each
// chunk of a (query, head) pair's keys leaves a partial result, (max, sum, unnormalised values) as d + 2 floats, and
// the last block of the pair to finish merges them (one kernel: a second kernel for the merge took 5 µs of a decode
// step's 16 a layer on an H100, a launch and a dependent round trip for a few KB). last_to_arrive also serves the
// greedy pick's blocks (greedy_pick.cu, pick_merge.cuh), top-k's (top_k_candidates.cu) and the head bounds'
// (head_bounds.cu).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "weights.cuh"  // warp_max, warp_sum

namespace qvl::cuda {

constexpr int kMaxChunks = 1024;  // the merge keeps a weight and a sum per chunk in shared memory (8 KB)

// Floats of workspace for `pairs` (query, head) pairs split into `chunks` (0: one chunk, nothing to merge).
inline int64_t split_workspace_floats(int64_t pairs, int64_t chunks, int64_t d) {
  return chunks > 1 ? pairs * chunks * (d + 2) : 0;
}

// Whether this block is the last of `blocks` to finish its partials (every thread gets the answer). The partials must
// be visible to whichever block merges. From SM70: after a barrier (the block's writes ordered before thread 0's next
// operation), thread 0 counts the block in on `counter` with one acquire-release atomic at GPU scope, which publishes
// what the block wrote and, in the last block, makes every other block's writes visible to its threads' reads after
// the second barrier (cooperative groups' grid barrier, from SM70, orders a block's writes from one thread the same
// way). Before SM70 (no acquire-release atomics; a fence is only documented to order its own thread's accesses there)
// every thread fences before the count and, in the last block, after it. The last block resets the counter to 0 for
// the next call (counters start at 0: the caller zeroes them once) after it has merged. (Every thread fenced on every
// GPU until 2026-11-30; with one atomic, and a barrier fewer in the decode attention's own merge, the 2B's decode
// attention at 4,096 keys took 9.82-9.86 µs of an H200's decode chain where it took 10.14; the o GEMV after it took
// most of that back. Measured before the address went through cvta.to.global: docs/performance.md.)
__device__ __forceinline__ bool last_to_arrive(unsigned* counter, unsigned blocks) {
  __shared__ bool last;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(before)
                 : "l"(__cvta_generic_to_global(counter))  // .global takes a global address (the same bits here)
                 : "memory");
    last = before == blocks - 1;
  }
  __syncthreads();
#else
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == blocks - 1;
  __syncthreads();
  if (last) __threadfence();
#endif
  return last;
}

// Merges the chunks' partial results of kHeads pairs (the same rescaling as the online softmax), by one block of
// kWarps warps: pair g's chunk c at p + (g·chunk_stride + c)·(d + 2), its output at out + g·d (kHeads·chunks <=
// kMaxChunks, d < 2^16). The partials come from other blocks, so they are read from L2 (__ldcg), past any stale L1
// line, and the reads a thread needs first are asked for at once: its first output's values of the first kAhead
// chunks (registers) together with a (max, sum) a thread (shared memory); then a warp a pair turns the maxima into
// weights, and each output is its weighted sum. Where the chunks are at most kAhead and the outputs at most the
// block's threads (the decode shapes up to 2 heads of 128 on 512 threads), that is one L2 round trip where there
// were five (two a pair, then the values): on an H200 the decode attention at 1,024 keys (4 chunks) 13.1 -> 10.3 µs,
// at 4,096 (16) 13.7 -> 11.8 (docs/performance.md); more chunks or outputs read the rest after the weights.
template <int kWarps, int kHeads>
__device__ void combine_partials(const float* p, float* out, int d, int chunks, int64_t chunk_stride) {
  static_assert(kHeads >= 1 && kHeads <= 8, "the decode kernels' query heads per kv head");
  constexpr int kAhead = 16;
  __shared__ float weight[kMaxChunks], chunk_sum[kMaxChunks], pair_sum[kHeads];
  const int stride = d + 2, outputs = kHeads * d, pieces = kHeads * chunks;  // 32-bit: divisions below are cheap
  const auto chunk_at = [&](int g, int c) { return p + (g * chunk_stride + c) * stride; };
  const int first = int(threadIdx.x);  // this thread's first output
  float ahead[kAhead];
#pragma unroll
  for (int c = 0; c < kAhead; ++c)
    if (first < outputs && c < chunks) ahead[c] = __ldcg(chunk_at(first / d, c) + 2 + first % d);
  for (int e = int(threadIdx.x); e < pieces; e += int(blockDim.x)) {
    const float* const q = chunk_at(e / chunks, e % chunks);
    weight[e] = __ldcg(q), chunk_sum[e] = __ldcg(q + 1);
  }
  __syncthreads();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int g = warp; g < kHeads; g += kWarps) {
    float* const w = weight + g * chunks;
    float best = -INFINITY, sum = 0.0f;
    for (int c = lane; c < chunks; c += 32) best = fmaxf(best, w[c]);
    best = warp_max(best);
    for (int c = lane; c < chunks; c += 32) {
      w[c] = w[c] == -INFINITY ? 0.0f : expf(w[c] - best);  // a chunk that saw no key contributes nothing
      sum += w[c] * chunk_sum[g * chunks + c];
    }
    sum = warp_sum(sum);
    if (lane == 0) pair_sum[g] = sum;
  }
  __syncthreads();
  for (int e = first; e < outputs; e += int(blockDim.x)) {
    const int g = e / d;
    const float* const w = weight + g * chunks;
    float value = 0.0f;
    int c = 0;
    if (e == first) {
#pragma unroll
      for (int a = 0; a < kAhead; ++a)
        if (a < chunks) value += w[a] * ahead[a];
      c = kAhead;
    }
#pragma unroll 8
    for (; c < chunks; ++c) value += w[c] * __ldcg(chunk_at(g, c) + 2 + e % d);
    out[e] = value / pair_sum[g];
  }
}

// The same merge inside a thread block cluster (SM90; attention_decode.cu launches one with the profile's overlapped
// launches where cluster_fits): each of the cluster's blocks has left its chunk's (max, sum, unnormalised values) for
// kHeads pairs in its own shared memory at `slot` (pair g at slot + g·(d + 2)); blocks of rank `used` and on saw no
// keys and left nothing. Every block of the cluster must call this (the barriers count them all). After a cluster
// barrier (which also makes the slots visible), the outputs are shared out over the first `used` blocks, a thread each,
// which asks for the pair's (max, sum) and its value from every slot over distributed shared memory at once: one round
// trip within the GPC where the global merge takes a fence, an atomic on a counter and a read of the partials back from
// L2. A second barrier keeps every block (its shared memory) alive until the reads are done. The sums go over the
// chunks in order, as combine_partials' values do (its sum of the weights is a warp reduction: the last bits may
// differ).
template <int kHeads, int kMaxBlocks>
__device__ void merge_in_cluster(const float* slot, float* out, int d, int used) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = int(cluster.block_rank());
  if (used > 1 && rank < used) {
    const int stride = d + 2, outputs = kHeads * d, threads = int(blockDim.x);
    for (int e = rank * threads + int(threadIdx.x); e < outputs; e += used * threads) {
      const int g = e / d;
      float best[kMaxBlocks], total[kMaxBlocks], value[kMaxBlocks];
#pragma unroll
      for (int b = 0; b < kMaxBlocks; ++b)
        if (b < used) {
          const float* const remote = cluster.map_shared_rank(slot, b) + g * stride;
          best[b] = remote[0], total[b] = remote[1], value[b] = remote[2 + e % d];
        }
      float m = -INFINITY;
#pragma unroll
      for (int b = 0; b < kMaxBlocks; ++b)
        if (b < used) m = fmaxf(m, best[b]);
      float sum = 0.0f, weighted = 0.0f;
#pragma unroll
      for (int b = 0; b < kMaxBlocks; ++b)
        if (b < used) {
          const float w = best[b] == -INFINITY ? 0.0f : expf(best[b] - m);
          sum += w * total[b], weighted += w * value[b];
        }
      out[e] = weighted / sum;
    }
  }
  cluster.sync();
#else
  (void)slot, (void)out, (void)d, (void)used;
  __trap();  // never launched below SM90 (cluster_fits)
#endif
}

}  // namespace qvl::cuda
