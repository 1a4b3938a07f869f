// Sampling's temperature and top-k: every logit divided by the temperature (in double, rounded to f32, as the host's
// sampler does), and the ids at or above the k-th largest value, ties kept, -inf excepted (core/top_k.h); then, where
// asked, top-p and the draw from them (draw_from_candidates.cuh) in the same launch.
//
// Why on the device: the host's sampler took the 2B model's 151,936 logits (608 KB copied back every token) and
// 0.43-0.60 ms a token to select from them on the H200 machine's host, where the greedy step is ~1.5 ms; this hands
// back 2 KB. A block takes 2,048 values (8 a thread, in registers; like greedy_pick.cu) and lists its k + 1 largest;
// the last block to finish (split_merge.cuh's counter) finds the k-th largest of all and keeps every listed value at
// or above it. A value equal to the k-th that a block did not list (its (k+1)-th is that value) makes the result -1
// (the host then samples from the logits), so what comes back is always exactly the host's set. The ids go out in id
// order (each counts the ids below it), as the host's walk needs.
//
// How, with few barriers: the first form found a block's list by k + 1 rounds of a block-wide maximum and the merge
// by k more (~41 dependent rounds, a barrier each: 25.4 µs alone on the H200 where greedy_pick takes 6.5). Now every
// value is a 64-bit key (the value's bits made to order as unsigned, then the index reversed: larger key = larger
// value, then lower index; 0 = not a value), unique, so ranks are counts:
// - the block: each thread's largest key; a warp sorts its 32 (shuffles); the (k+1)-th largest of the 256 is found
//   by each key's rank (its lane plus, in each other warp, a binary search); only the k + 1 threads at or above it can
//   hold a key of the block's k + 1 largest, so at most 8·(k + 1) keys pass, and their ranks among themselves (counts)
//   place the list;
// - the merge: the k-th largest of the lists' heads bounds the k-th largest of all from below, so only the (k, or
//   fewer) lists whose head reaches it matter: their first k keys are read from L2 in one round trip (400 at k 20),
//   and of those only the ones reaching it (typically ~k) are ranked; the k-th largest is the one with k - 1 of them
//   above it.
// Appends to a list in shared memory take one atomic a warp (append_slots). The last block passes ~15 barriers in
// all (6 with every block, 6 in the merge, 3 in the draw), whatever k.
//
// Measured (H200, the 2B's vocabulary, k 20; perf mode: each launch alone between events, launch included):
// 16.2-16.5 µs (greedy_pick 6.4-6.5), 18.8-19.1 with the draw, where the rounds' kernel and the draw's own launch
// took 25.4 + 9.2. By %globaltimer stamps in a scratch harness (a barrier each; the GPU idles between its launches, so read
// them as shares): the blocks' lists are done 4.8 µs after the start (the loads and keys 1.7 of it), and the last
// block's merge and output take 8 more, a chain of ~8 steps between barriers, each a few hundred cycles; the draw
// 3.2. A first merge that counted each key's rank by a binary search in each other list spent 4.9 µs there
// (divergent loops), now ~1.
#include "top_k_candidates.cuh"

#include "common.cuh"
#include "draw_from_candidates.cuh"
#include "split_merge.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256, kPerThread = 8, kChunk = kThreads * kPerThread, kWarps = kThreads / 32;
constexpr int kMaxBlocks = 128, kListLength = kTopKMax + 1;
constexpr int kMaxPassed = kPerThread * kListLength;  // a block's keys past its threshold: 8 of each of k + 1 threads
static_assert(kMaxBlocks <= kThreads && kTopKMaxCandidates <= kThreads, "a thread a list head, a thread a candidate");

// Order-preserving: a larger value gives a larger key, an equal value the lower index the larger; NaN (not a value:
// past the row, or NaN itself, which the row's flag reports) gives 0, below every value, -inf included. -0 ranks
// below +0; what is kept and the ties are judged by value, so equal zeros are kept or counted alike.
__device__ __forceinline__ uint64_t key_of(float value, int index) {
  if (isnan(value)) return 0;
  const uint32_t bits = __float_as_uint(value);
  const uint32_t ordered = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
  return uint64_t(ordered) << 32 | ~uint32_t(index);
}
__device__ __forceinline__ float value_of(uint64_t key) {
  const auto ordered = uint32_t(key >> 32);
  return __uint_as_float(ordered & 0x80000000u ? ordered & 0x7fffffffu : ~ordered);
}
__device__ __forceinline__ int index_of(uint64_t key) { return int(~uint32_t(key)); }

// The 32 lanes' keys, descending across the warp (a bitonic sort: 15 exchanges).
__device__ __forceinline__ uint64_t warp_sort_descending(uint64_t x) {
  const int lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1)
#pragma unroll
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      const uint64_t y = __shfl_xor_sync(0xffffffffu, x, stride);
      const bool larger_here = ((lane & stride) == 0) == ((lane & size) == 0);
      x = larger_here == (y > x) ? y : x;  // the larger here, the smaller in the partner lane
    }
  return x;
}

// How many of a descending list of 32 keys (zeros last) are above `key` (> 0): a branchless binary search.
__device__ __forceinline__ int count_above(const uint64_t (&list)[32], uint64_t key) {
  int at = 0;
#pragma unroll
  for (int step = 16; step > 0; step >>= 1)
    if (list[at + step - 1] > key) at += step;
  return at + (list[at] > key ? 1 : 0);
}

// Slots for this thread's `count` entries in a list shared by the block (its first slot): one atomic a warp, the
// lanes' places by a scan, where an atomic a lane queued up to ~30 on one address. Every lane of the warp calls it.
__device__ __forceinline__ int append_slots(int* counter, int count) {
  const int lane = int(threadIdx.x) % 32;
  int inclusive = count;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int below = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += below;
  }
  int first = 0;
  if (lane == 31 && inclusive > 0) first = atomicAdd(counter, inclusive);
  return __shfl_sync(0xffffffffu, first, 31) + inclusive - count;
}

// This thread's keys at or above `threshold` (0 excepted: not a value) appended to a list the block shares.
template <int kCount>
__device__ __forceinline__ void append_reaching(const uint64_t (&keys)[kCount], uint64_t threshold, int* count,
                                                uint64_t* list) {
  int mine = 0;
#pragma unroll
  for (int u = 0; u < kCount; ++u) mine += keys[u] != 0 && keys[u] >= threshold;
  int slot = append_slots(count, mine);
#pragma unroll
  for (int u = 0; u < kCount; ++u)
    if (keys[u] != 0 && keys[u] >= threshold) list[slot++] = keys[u];
}

// How many of `keys` (distinct where not 0) are above `key`, counting only up to `enough` (then any count >= it).
// The threads of a warp read the same key at once: a broadcast, no bank conflict.
__device__ __forceinline__ int count_above(const uint64_t* keys, int n, uint64_t key, int enough) {
  int above = 0;
  for (int j = 0; j < n && above < enough; j += 8) {
#pragma unroll
    for (int u = 0; u < 8; ++u) above += j + u < n && keys[j + u] > key;
  }
  return above;
}

struct Workspace {
  uint64_t key[kMaxBlocks][kListLength];  // each block's k + 1 largest keys, largest first (0: it had fewer values)
  int nan[kMaxBlocks];
  unsigned arrivals;
};

struct BlockShared {
  uint64_t sorted[kWarps][32];  // each warp's thread maxima, descending
  uint64_t passed[kMaxPassed];
  uint64_t threshold;
  int passed_count;
};
struct MergeShared {
  uint64_t heads[kMaxBlocks];
  uint64_t reaching[kTopKMax * kTopKMax];  // the listed keys that reach the heads' threshold
  int list_block[kTopKMax];                // the blocks whose head reaches it
  uint64_t head_threshold, kth_key;
  int list_count, reaching_count, kept_count, tie_unlisted;
  float value[kTopKMaxCandidates];  // the kept candidates, then in id order
  int32_t id[kTopKMaxCandidates];
  float by_id_value[kTopKMaxCandidates];
  int32_t by_id[kTopKMaxCandidates];
  DrawScratch draw;
};

// The block's k + 1 largest keys, largest first, into its list (0 past its values).
__device__ void list_block(const uint64_t (&keys)[kPerThread], int k, Workspace& ws, BlockShared& s) {
  const int t = int(threadIdx.x), lane = t % 32, warp = t / 32;
  uint64_t best = keys[0];
#pragma unroll
  for (int u = 1; u < kPerThread; ++u) best = keys[u] > best ? keys[u] : best;
  const uint64_t sorted = warp_sort_descending(best);
  s.sorted[warp][lane] = sorted;
  if (t == 0) s.threshold = 0, s.passed_count = 0;
  __syncthreads();
  // The (k+1)-th largest thread maximum (0 where fewer than k + 1 threads hold a value: every value passes). Its rank
  // is at least its lane, so only lanes <= k look.
  if (lane <= k && sorted != 0) {
    int rank = lane;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      if (w != warp) rank += count_above(s.sorted[w], sorted);
    if (rank == k) s.threshold = sorted;
  }
  __syncthreads();
  append_reaching(keys, s.threshold, &s.passed_count, s.passed);  // only the k + 1 threads whose largest reaches it
  __syncthreads();
  const int passed = s.passed_count;
  const int b = int(blockIdx.x);
  for (int i = t; i < passed; i += kThreads) {
    const int rank = count_above(s.passed, passed, s.passed[i], k + 1);
    if (rank <= k) ws.key[b][rank] = s.passed[i];
  }
  for (int r = passed + t; r <= k; r += kThreads) ws.key[b][r] = 0;
}

// The merge, by the last block: every list's head and (k+1)-th key, then the first k keys of the lists whose head
// reaches the k-th largest head, each read once from L2 in one round trip (the blocks wrote them: __ldcg, past any
// stale L1 line); the rest in shared memory. Keeps the candidates in s.value / s.id (s.kept_count; more than
// kTopKMaxCandidates: not all written) and sets s.tie_unlisted; returns whether a block saw NaN.
__device__ bool merge_lists(const Workspace& ws, int k, int blocks, MergeShared& s) {
  const int t = int(threadIdx.x);
  uint64_t head = 0, tail = 0;
  int nan = 0;
  if (t < blocks) head = __ldcg(&ws.key[t][0]), tail = __ldcg(&ws.key[t][k]), nan = __ldcg(&ws.nan[t]);
  if (t < kMaxBlocks) s.heads[t] = head;
  if (t == 0) s.head_threshold = 0, s.kth_key = 0, s.list_count = 0, s.reaching_count = 0, s.kept_count = 0;
  if (t == 0) s.tie_unlisted = 0;
  const bool any_nan = __syncthreads_or(nan);
  // The k-th largest head (0 where fewer than k blocks hold a value): at least k listed keys reach it, so the k-th
  // largest of all does too, and only the lists whose head reaches it can hold a key above it.
  if (head != 0 && count_above(s.heads, blocks, head, k) == k - 1) s.head_threshold = head;
  __syncthreads();
  const uint64_t threshold = s.head_threshold;
  const bool reaches = head != 0 && head >= threshold;  // k lists, or (threshold 0) every one holding a value
  const int list = append_slots(&s.list_count, reaches ? 1 : 0);
  if (reaches) s.list_block[list] = t;
  __syncthreads();
  const int lists = s.list_count;
  constexpr int kReads = kTopKMax * kTopKMax / kThreads;  // a thread's share of k lists of k keys at most
  static_assert(kReads * kThreads == kTopKMax * kTopKMax, "the lists' keys split evenly over the threads");
  uint64_t read[kReads];
#pragma unroll
  for (int j = 0; j < kReads; ++j) {  // all issued before any is used: one round trip
    const int e = t + j * kThreads;
    read[j] = e < lists * k ? __ldcg(&ws.key[s.list_block[e / k]][e % k]) : 0;
  }
  append_reaching(read, threshold, &s.reaching_count, s.reaching);
  __syncthreads();
  // The k-th largest key of all: the reaching key with k - 1 reaching keys above it (a key below the threshold is
  // below every reaching one). Typically ~k of them, a thread each; at most k², where a thread stops counting at k.
  const int n = s.reaching_count;
  for (int i = t; i < n; i += kThreads)
    if (count_above(s.reaching, n, s.reaching[i], k) == k - 1) s.kth_key = s.reaching[i];
  __syncthreads();
  const float kth = s.kth_key == 0 ? -INFINITY : value_of(s.kth_key);  // fewer than k listed: every value is kept
  const auto keeps = [&](uint64_t key) { return key != 0 && value_of(key) >= kth && value_of(key) != -INFINITY; };
  if (kth != -INFINITY && tail != 0 && value_of(tail) >= kth) s.tie_unlisted = 1;  // one block t did not list
  // Kept: keys of the lists read (ties past a list's reaching keys included; still in registers); a list whose head
  // is below the threshold holds one only where its head's value equals the k-th largest's (a tie at the threshold's
  // value, the lower index first): rare, so read from L2 here.
  int kept_here = 0;
#pragma unroll
  for (int j = 0; j < kReads; ++j) {
    if (!keeps(read[j])) read[j] = 0;
    kept_here += read[j] != 0;
  }
  const bool tied_below = head != 0 && !reaches && keeps(head);
  if (tied_below)
    for (int at = 0; at < k; ++at) kept_here += keeps(__ldcg(&ws.key[t][at]));
  int slot = append_slots(&s.kept_count, kept_here);
  const auto keep = [&](uint64_t key) {
    if (slot < kTopKMaxCandidates) s.value[slot] = value_of(key), s.id[slot] = index_of(key);
    ++slot;
  };
#pragma unroll
  for (int j = 0; j < kReads; ++j)
    if (read[j] != 0) keep(read[j]);
  if (tied_below)
    for (int at = 0; at < k; ++at)
      if (const uint64_t key = __ldcg(&ws.key[t][at]); keeps(key)) keep(key);
  __syncthreads();
  return any_nan;
}

__global__ void __launch_bounds__(kThreads) top_k_candidates_kernel(TopKCandidatesArgs a) {
  Workspace& ws = *static_cast<Workspace*>(a.workspace);
  __shared__ union {
    BlockShared block;
    MergeShared merge;
  } shared;
  const int k = a.top_k, base = int(blockIdx.x) * kChunk, t = int(threadIdx.x);
  wait_for_previous_kernel();

  float v[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {  // all loads issued before any is used
    const int i = base + u * kThreads + t;
    v[u] = i < a.count ? a.logits[i] : NAN;  // NaN: not a value
  }
  bool nan = false;
  uint64_t keys[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int i = base + u * kThreads + t;
    nan |= isnan(v[u]) && i < a.count;
    keys[u] = key_of(float(double(v[u]) / a.temperature), i);  // NaN stays NaN: key 0
  }
  list_block(keys, k, ws, shared.block);
  nan = __syncthreads_or(nan);
  if (t == 0) ws.nan[blockIdx.x] = nan;
  if (!last_to_arrive(&ws.arrivals, gridDim.x)) return;

  // The merge (the block's shared memory is free: last_to_arrive's barriers are after its last use).
  MergeShared& s = shared.merge;
  const bool any_nan = merge_lists(ws, k, int(gridDim.x), s);
  const int n = s.kept_count;
  const bool fits = !s.tie_unlisted && n <= kTopKMaxCandidates && !a.give_up;
  if (t == 0) {
    a.out[0] = fits ? n : -1;
    a.out[1] = any_nan ? 1 : 0;
    ws.arrivals = 0;
  }
  const bool draws = a.drawn != nullptr && fits && !any_nan && n > 0;
  if (a.drawn != nullptr && !draws && t == 0) *a.drawn = 0;  // nothing drawn: the state kept
  if (!fits) return;
  if (t < n) {
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += s.id[j] < s.id[t];
    a.out[2 + 2 * rank] = s.id[t];
    a.out[3 + 2 * rank] = int64_t(__float_as_uint(s.value[t]));
    s.by_id[rank] = s.id[t], s.by_id_value[rank] = s.value[t];
  }
  if (!draws) return;
  __syncthreads();
  draw_from_candidates(s.by_id_value, s.by_id, n, a.top_p, a.skipped_draws, a.state, a.drawn, s.draw);
}

}  // namespace

int64_t top_k_candidates_max_count() { return int64_t(kMaxBlocks) * kChunk; }
int64_t top_k_candidates_workspace_bytes() { return int64_t(sizeof(Workspace)); }

void top_k_candidates(const TopKCandidatesArgs& args, bool overlap, cudaStream_t stream) {
  const int64_t blocks = (args.count + kChunk - 1) / kChunk;
  launch_kernel(top_k_candidates_kernel, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, overlap, args);
}

}  // namespace qvl::cuda
