// Sampling's temperature and top-k: every logit divided by the temperature (in double, rounded to f32, as the host's
// sampler does), and the ids at or above the k-th largest value, ties kept, -inf excepted (core/top_k.h).
//
// Why on the device: the host's sampler took the 2B model's 151,936 logits (608 KB copied back every token) and
// 0.43-0.60 ms a token to select from them on the H200 machine's host, where the greedy step is ~1.5 ms; this hands
// back 2 KB. A block takes 2,048 values (8 a thread, in registers; like greedy_pick.cu) and finds its k + 1
// largest by k + 1 rounds of a block-wide maximum (one barrier a round; the winner's thread marks it taken and
// rescans its 8). The last block to finish (split_merge.cuh's counter) finds the k-th largest of all by popping the
// largest head of the blocks' sorted lists k times, and keeps every listed value at or above it. A value equal to the
// k-th that a block did not list (its (k+1)-th is that value) makes the result -1 (the host then samples from the
// logits), so what comes back is always exactly the host's set. The ids go out in id order (each counts the ids
// below it), as the host's walk needs.
#include "top_k_candidates.cuh"

#include <climits>

#include "common.cuh"
#include "split_merge.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256, kPerThread = 8, kChunk = kThreads * kPerThread;
constexpr int kMaxBlocks = 128, kListLength = kTopKMax + 1;
constexpr int kNone = INT_MAX;  // the index of "nothing": every real entry, -inf included, ranks before it

struct Entry {
  float value;
  int index;
};

// a ranks before b: the larger value, then the lower index. A taken value (NaN) never ranks before anything.
__device__ __forceinline__ bool before(Entry a, Entry b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

// The first-ranked of every thread's entry, in every thread; `slots` alternates between calls so that one barrier a
// call suffices (a thread writes a slot again two calls later, after every thread has read it).
__device__ __forceinline__ Entry block_first(Entry mine, Entry (*slots)[kThreads / 32], int call) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Entry other{__shfl_xor_sync(0xffffffffu, mine.value, offset), __shfl_xor_sync(0xffffffffu, mine.index, offset)};
    if (before(other, mine)) mine = other;
  }
  Entry* const slot = slots[call & 1];
  if (threadIdx.x % 32 == 0) slot[threadIdx.x / 32] = mine;
  __syncthreads();
  Entry first = slot[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w)
    if (before(slot[w], first)) first = slot[w];
  return first;
}

struct Workspace {
  float value[kMaxBlocks][kListLength];  // each block's k + 1 largest, largest first
  int index[kMaxBlocks][kListLength];    // -1: the block had fewer values
  int nan[kMaxBlocks];
  unsigned arrivals;
};

__global__ void __launch_bounds__(kThreads) top_k_candidates_kernel(TopKCandidatesArgs a) {
  Workspace& ws = *static_cast<Workspace*>(a.workspace);
  __shared__ Entry slots[2][kThreads / 32];
  const int k = a.top_k, base = int(blockIdx.x) * kChunk;
  wait_for_previous_kernel();

  float v[kPerThread];
  bool nan = false;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {  // all loads issued before any is used
    const int i = base + u * kThreads + int(threadIdx.x);
    v[u] = i < a.count ? a.logits[i] : NAN;  // NaN: not a value (taken)
  }
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    nan |= isnan(v[u]) && base + u * kThreads + int(threadIdx.x) < a.count;
    v[u] = float(double(v[u]) / a.temperature);  // NaN stays NaN
  }
  const auto rescan = [&] {
    Entry best{-INFINITY, kNone};
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const Entry e{v[u], base + u * kThreads + int(threadIdx.x)};
      if (before(e, best)) best = e;  // rising indices: an equal later value never replaces
    }
    return best;
  };
  Entry mine = rescan();
  for (int r = 0; r <= k; ++r) {
    const Entry first = block_first(mine, slots, r);
    if (threadIdx.x == 0) {
      ws.value[blockIdx.x][r] = first.value;
      ws.index[blockIdx.x][r] = first.index == kNone ? -1 : first.index;
    }
    if (first.index != kNone && (first.index - base) % kThreads == int(threadIdx.x)) {
      const int taken = (first.index - base) / kThreads;
#pragma unroll
      for (int u = 0; u < kPerThread; ++u)
        if (u == taken) v[u] = NAN;
      mine = rescan();
    }
  }
  nan = __syncthreads_or(nan);
  if (threadIdx.x == 0) ws.nan[blockIdx.x] = nan;
  if (!last_to_arrive(&ws.arrivals, gridDim.x)) return;

  // The merge: the blocks' lists (from L2: other blocks wrote them), thread b < blocks owning list b.
  const int blocks = int(gridDim.x);
  __shared__ float lists[kMaxBlocks * kTopKMax];
  __shared__ Entry kept[kTopKMaxCandidates];
  __shared__ int kept_count, tie_unlisted;
  for (int e = int(threadIdx.x); e < blocks * k; e += kThreads) lists[e] = __ldcg(&ws.value[e / k][e % k]);
  if (threadIdx.x == 0) kept_count = 0, tie_unlisted = 0;
  const bool any_nan = __syncthreads_or(int(threadIdx.x) < blocks && __ldcg(&ws.nan[threadIdx.x]));
  const int b = int(threadIdx.x);
  int head = 0;
  float kth = -INFINITY;
  for (int r = 0; r < k; ++r) {  // pop the largest head k times: the k-th popped is the k-th largest of all
    const Entry mine_head = b < blocks && head < k ? Entry{lists[b * k + head], b} : Entry{-INFINITY, kNone};
    const Entry first = block_first(mine_head, slots, k + 1 + r);
    if (first.index == b) ++head;
    kth = first.value;
  }
  if (b < blocks && kth != -INFINITY && __ldcg(&ws.index[b][k]) >= 0 && __ldcg(&ws.value[b][k]) >= kth)
    tie_unlisted = 1;  // a value equal to the k-th that block b did not list
  for (int e = int(threadIdx.x); e < blocks * k; e += kThreads) {
    const float value = lists[e];
    const int index = __ldcg(&ws.index[e / k][e % k]);
    if (index >= 0 && value >= kth && value != -INFINITY) {
      const int slot = atomicAdd(&kept_count, 1);
      if (slot < kTopKMaxCandidates) kept[slot] = {value, index};
    }
  }
  __syncthreads();
  const int n = kept_count;
  const bool fits = !tie_unlisted && n <= kTopKMaxCandidates;
  if (threadIdx.x == 0) {
    a.out[0] = fits ? n : -1;
    a.out[1] = any_nan ? 1 : 0;
    ws.arrivals = 0;
  }
  if (!fits) return;
  for (int i = int(threadIdx.x); i < n; i += kThreads) {
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += kept[j].index < kept[i].index;
    a.out[2 + 2 * rank] = kept[i].index;
    a.out[3 + 2 * rank] = int64_t(__float_as_uint(kept[i].value));
  }
}

}  // namespace

int64_t top_k_candidates_max_count() { return int64_t(kMaxBlocks) * kChunk; }
int64_t top_k_candidates_workspace_bytes() { return int64_t(sizeof(Workspace)); }

void top_k_candidates(const TopKCandidatesArgs& args, bool overlap, cudaStream_t stream) {
  const int64_t blocks = (args.count + kChunk - 1) / kChunk;
  launch_kernel(top_k_candidates_kernel, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, overlap, args);
}

}  // namespace qvl::cuda
