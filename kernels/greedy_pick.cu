// One block of 1,024 threads over the row (the 2B model's 151,936 logits, 608 KB, in L2 behind the output head
// that wrote them): each thread keeps the largest value it saw and its first index over a strided share, four loads
// in flight; then the block keeps the larger value of each pair, the smaller index where they are equal, so the
// result is the first index of the maximum whatever the order of the reductions. Launched plainly (no overlap): it
// ends a decode step's work (a recording closes with barrier.cuh's empty kernel after it), and the host copies its
// 16 bytes as soon as the step ends.
#include "common.cuh"
#include "greedy_pick.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 1024, kUnroll = 4;

struct Best {
  float value;    // -inf, index `count`: nothing above -inf seen yet
  int64_t index;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
}

__global__ void __launch_bounds__(kThreads) greedy_pick_kernel(const float* __restrict__ logits, int64_t count,
                                                               int64_t* pick) {
  Best best{-INFINITY, count};
  int nan = 0;
  for (int64_t base = threadIdx.x; base < count; base += int64_t(kThreads) * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kThreads;
      v[u] = i < count ? logits[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // indices rise with u: a later equal value never replaces the kept one
      nan |= isnan(v[u]) ? 1 : 0;
      if (v[u] > best.value) best = {v[u], base + int64_t(u) * kThreads};
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset), __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
    nan |= __shfl_xor_sync(0xffffffffu, nan, offset);
  }
  __shared__ Best warps[kThreads / 32];
  __shared__ int nans[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = best, nans[threadIdx.x / 32] = nan;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kThreads / 32; ++w) best = better(best, warps[w]), nan |= nans[w];
  pick[0] = best.index == count ? 0 : best.index;  // every value -inf (or NaN): the first
  pick[1] = nan;
}

}  // namespace

void greedy_pick(const float* logits, int64_t count, int64_t* pick, cudaStream_t stream) {
  greedy_pick_kernel<<<1, kThreads, 0, stream>>>(logits, count, pick);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
