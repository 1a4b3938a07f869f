#pragma once
// The end of a split over the keys (flash-decoding: attention.cu's and attention_decode.cu's split kernels): each
// chunk of a (query, head) pair's keys leaves a partial result, (max, sum, unnormalised values) as d + 2 floats, and
// the last block of the pair to finish merges them (one kernel: a second kernel for the merge took 5 µs of a decode
// step's 16 a layer on an H100, a launch and a dependent round trip for a few KB).
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

constexpr int kMaxChunks = 1024;  // the merge keeps a weight per chunk in shared memory

// Floats of workspace for `pairs` (query, head) pairs split into `chunks` (0: one chunk, nothing to merge).
inline int64_t split_workspace_floats(int64_t pairs, int64_t chunks, int64_t d) {
  return chunks > 1 ? pairs * chunks * (d + 2) : 0;
}

// Whether this block is the last of `blocks` to finish its partials (every thread gets the answer). The partials
// must be visible to whichever block merges: fence, then count this block in on `counter`; the last one resets it
// to 0 for the next call (counters start at 0: the caller zeroes them once) after it has merged.
__device__ __forceinline__ bool last_to_arrive(unsigned* counter, unsigned blocks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == blocks - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// The block's largest / summed value (every thread gets it), through one float per warp in shared memory.
template <int kWarps, typename Combine>
__device__ float block_reduce(float v, float identity, Combine combine) {
  __shared__ float per_warp[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) v = combine(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  v = identity;
  for (int w = 0; w < kWarps; ++w) v = combine(v, per_warp[w]);
  __syncthreads();  // per_warp may be written again by the next call
  return v;
}

// Merges the chunks' partial results of `heads` pairs (the same rescaling as the online softmax), by one block of
// kWarps warps: pair g's chunk c at p + (g·chunk_stride + c)·(d + 2), its output at out + g·d. Per pair the chunks'
// maxima and sums a thread each and their weights in shared memory (heads·chunks <= kMaxChunks), then every output
// dimension of every pair at once, its sum over the chunks with the loads unrolled. (Thread by thread over the
// chunks it was three chains of dependent L2 reads, 3 x 17 at 4,096 keys, in the last block of every pair.) The
// partials come from other blocks, so they are read from L2 (__ldcg), past any stale L1 line.
template <int kWarps>
__device__ void combine_partials(const float* p, float* out, int64_t d, int64_t chunks, int heads, int64_t chunk_stride) {
  constexpr int kMaxHeads = 8;
  __shared__ float weight[kMaxChunks], pair_sum[kMaxHeads];
  const auto stride = d + 2;
  for (int g = 0; g < heads; ++g) {
    const float* const pg = p + g * chunk_stride * stride;
    float local_best = -INFINITY;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) local_best = fmaxf(local_best, __ldcg(pg + c * stride));
    const float best = block_reduce<kWarps>(local_best, -INFINITY, [](float a, float b) { return fmaxf(a, b); });
    float local_sum = 0.0f;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      const float m = __ldcg(pg + c * stride);
      const float w = m == -INFINITY ? 0.0f : expf(m - best);  // a chunk that saw no key contributes nothing
      weight[g * chunks + c] = w;
      local_sum += w * __ldcg(pg + c * stride + 1);
    }
    const float sum = block_reduce<kWarps>(local_sum, 0.0f, [](float a, float b) { return a + b; });
    if (threadIdx.x == 0) pair_sum[g] = sum;
  }
  __syncthreads();  // weight[] and pair_sum[]
  for (int64_t e = threadIdx.x; e < heads * d; e += blockDim.x) {
    const int64_t g = e / d, c = e % d;
    const float* const pg = p + g * chunk_stride * stride + 2 + c;
    float value = 0.0f;
#pragma unroll 8
    for (int64_t ch = 0; ch < chunks; ++ch) value += weight[g * chunks + ch] * __ldcg(pg + ch * stride);
    out[e] = value / pair_sum[g];
  }
}

}  // namespace qvl::cuda
