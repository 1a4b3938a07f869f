// Decode attention split over the keys, a tile of keys per warp in registers.
//
// What it moves: a decode step's attention reads the cache, 2·T·Hkv·D elements (16.8 MB for the 2B model at 4,096
// keys in bf16: ~4 µs at an H200's 4.8 TB/s), and computes 4·Hq·D FLOPs a key. What bounded the kernels before
// this one was not either but latency: the split kernel of attention.cu (a warp per query head, two lanes a key)
// read each kv head's rows once per query head and issued a load per element of a value row; a version that staged
// tiles in shared memory with asynchronous copies spent ~4,500 instructions a warp for 128 keys in four
// block-synchronised phases, at 1.2 instructions a cycle an SM (Nsight Compute: 28 µs at base clocks for 4,096 keys).
//
// Here a warp takes kTile keys of one kv head for all its kHeads query heads:
// - Loads: kLanes lanes share a row (16 bytes each: 8 bf16 or 4 f32), 32 / kLanes rows a warp load; a lane loads
//   kLoads rows of K and of V, all issued before any is used (one DRAM round trip a tile, 2·kLoads·16 bytes a lane
//   in flight).
// - Scores: each lane multiplies its piece of every row by its piece of every query head (q in registers), then the
//   kLoads·kHeads partial sums are reduced across the row's kLanes lanes by halving exchanges (reduce_scatter: 15
//   shuffles for 16 sums over 16 lanes, not 64), leaving each lane whole scores.
// - Softmax: online, per query head across the warp's tiles (max by shuffles, the sum kept per lane and added up
//   at the end).
// - Values: each lane fetches the probabilities its rows need from the lanes holding them (kLoads·kHeads shuffles)
//   and accumulates its 16 bytes of dimensions for every head; the warp's row groups are added at the end.
// The block's warps (tiles kWarps apart in its chunk) are merged in shared memory; the chunks, when there are
// several, by the last block of the (query, kv head) to finish (split_merge.cuh), or on SM90, where up to 8 chunks a
// pair fit as resident thread block clusters, inside the cluster over distributed shared memory (merge_in_cluster:
// on an H200 the 2B's decode at 256 and 1,024 tokens of context +2-5%; docs/performance.md).
// The rows before the query's position come from earlier passes (a decode step's cache), so a block launched
// early (programmatic dependent launch, common.cuh: possibly while several kernels of the chain before it are still
// running, none of which writes those rows) loads its warps' first tiles of them before it waits; q and the rows
// from the position on are read after. Measured against the kernel before: docs/performance.md.
#include "attention_decode.cuh"

#include <algorithm>
#include <stdexcept>

#include "attention_mask.cuh"
#include "common.cuh"
#include "kv_cache.cuh"
#include "split_merge.cuh"

namespace qvl::cuda {
namespace {

constexpr int kFill = 1;  // blocks: this many times the SMs (docs/performance.md has the sweep)
constexpr int kMaxClusterChunks = 8;  // the portable cluster size (cluster_fits)

template <int kLanesPerRow, int kHeadsPerKv, typename KV>
struct DecodeShape {
  static constexpr int kLanes = kLanesPerRow;
  static constexpr int kHeads = kHeadsPerKv;
  static constexpr int kPerUnit = Vec16<KV>::kCount;  // elements in a lane's 16 bytes of a row
  static constexpr int kD = kLanes * kPerUnit;        // the head size
  static constexpr int kRows = 32 / kLanes;           // rows a warp load covers
  static constexpr int kLoads = std::min(8, 16 / kHeads);  // rows of K (and of V) a lane loads a tile
  static constexpr int kTile = kLoads * kRows;        // keys a warp takes at a time
  static constexpr int kValues = kLoads * kHeads;     // a lane's partial scores before the reduction
  static constexpr int kKept = kValues >= kLanes ? kValues / kLanes : 1;  // its whole scores after it
  static constexpr int kHolders = kValues / kKept;    // lanes of a row group holding different scores
  static constexpr int kSpread = kLanes / kHolders;   // holder h is lane h·kSpread of the group (and its copies)
  // Warps a block: 16 (the SM's 64K registers at 128 a thread) where a lane's q and sums take 2 x 16 registers
  // (bf16 up to 2 heads, f32 up to 4); 8 for more (at 128 registers 8 bf16 heads of 128 spilled 660 bytes; they
  // take 255); and at most 32 KB of warps' sums to merge (8 bf16 heads of 256: 4 warps). One block an SM: the fewer
  // chunks, the shorter the merge at the end (docs/performance.md).
  static constexpr int kWarps = std::min(kHeads * kPerUnit <= 16 ? 16 : 8, 8192 / (kHeads * kD));
  static constexpr int kThreads = 32 * kWarps;
};

// x[0, kCount): a lane's partial sums of kCount values, each spread over the kMask·2 lanes of its row group. On
// return x[0, kKept) are whole sums: each exchange sends the half of x the partner keeps and adds the half it
// receives, so the lane whose group index is l keeps values [l·kKept, (l + 1)·kKept) (when there are fewer values
// than lanes, value l / (lanes / values), the last exchanges being plain sums).
template <int kCount, int kMask>
__device__ __forceinline__ void reduce_scatter(float* x, int lane) {
  if constexpr (kMask >= 1) {
    if constexpr (kCount > 1) {
      constexpr int kHalf = kCount / 2;
      const bool upper = lane & kMask;
#pragma unroll
      for (int c = 0; c < kHalf; ++c) {
        const float send = upper ? x[c] : x[c + kHalf];
        const float keep = upper ? x[c + kHalf] : x[c];
        x[c] = keep + __shfl_xor_sync(0xffffffffu, send, kMask);
      }
      reduce_scatter<kHalf, kMask / 2>(x, lane);
    } else {
      x[0] += __shfl_xor_sync(0xffffffffu, x[0], kMask);
      reduce_scatter<1, kMask / 2>(x, lane);
    }
  }
}

struct DecodeParams {
  const float* q;
  const void* k;
  const void* v;
  float* out;
  float* partials;
  unsigned* arrivals;
  int64_t s, hq, hkv, kv_len, past;
  const int64_t* past_on_device;
  bool causal;
  const int64_t* bounds;
  int64_t segments;
  float scale;
};

// A query's keys cut into at most `chunks` runs of whole tiles, a tile for each of the block's kWarps warps at
// least; `used` of them non-empty. The host sizes the grid for the longest range (kv_len: a recorded step's is the
// cache's capacity); a block computes its own query's split, so a short context still takes few, full chunks.
// (Unsigned divisions: a 64-bit one by a run-time value is ~70 instructions, a warp's whole tile ~1,000.)
template <int kTile, int kWarps>
__device__ __forceinline__ void decode_chunking(int64_t keys, unsigned chunks, int& used, int& chunk_tiles) {
  const unsigned tiles = max(1u, unsigned((keys + kTile - 1) / kTile));
  const unsigned wanted = max(1u, min(chunks, (tiles + kWarps - 1) / kWarps));
  chunk_tiles = int((tiles + wanted - 1) / wanted);
  used = int((tiles + chunk_tiles - 1) / chunk_tiles);
}

// kCluster: the grid's chunks of a (query, kv head) are one thread block cluster and merge in it (merge_in_cluster);
// otherwise the last block to arrive merges through L2 (combine_partials).
template <typename Shape, typename KV, bool kCluster>
__global__ void __launch_bounds__(Shape::kThreads, 1) attention_decode_kernel(DecodeParams p) {
  constexpr int kLanes = Shape::kLanes, kHeads = Shape::kHeads, kPerUnit = Shape::kPerUnit, kD = Shape::kD;
  constexpr int kRows = Shape::kRows, kLoads = Shape::kLoads, kTile = Shape::kTile, kValues = Shape::kValues;
  constexpr int kKept = Shape::kKept, kSpread = Shape::kSpread, kWarps = Shape::kWarps, kThreads = Shape::kThreads;
  __shared__ float warp_best[kWarps][kHeads], warp_total[kWarps][kHeads], warp_weight[kWarps][kHeads];
  __shared__ float block_best[kHeads];
  __shared__ __align__(16) float warp_acc[kWarps][kHeads][kD];
  __shared__ __align__(16) float cluster_slot[kCluster ? kHeads * (kD + 2) : 1];  // this chunk's (merge_in_cluster)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_group = lane / kLanes, piece = lane % kLanes;  // which row of a load, which 16 bytes of it
  const int unit = blockIdx.y;                                 // (query, kv head)
  const int64_t i = unit / int(p.hkv), kvh = unit % int(p.hkv), h0 = kvh * kHeads;
  allow_next_kernel();
  int64_t past = p.past, kv_len = p.kv_len;
  if (p.past_on_device) past = *p.past_on_device, kv_len = past + p.s;  // written by a copy before the replay
  int64_t lo, hi;
  int used, chunk_tiles;
  visible_keys(i, kv_len, p.causal, past, p.bounds, p.segments, lo, hi);
  decode_chunking<kTile, kWarps>(hi - lo, gridDim.x, used, chunk_tiles);
  const int64_t chunk = blockIdx.x;
  if (chunk >= used) {  // this query's range needs fewer chunks than the grid has
    if constexpr (kCluster)
      merge_in_cluster<kHeads, kMaxClusterChunks>(cluster_slot, p.out + (i * p.hq + h0) * kD, kD, used);
    return;
  }
  const int64_t first = lo + chunk * chunk_tiles * kTile, last = min(hi, first + int64_t(chunk_tiles) * kTile);
  // Rows before the position are earlier passes' (see the top); a segment mask's rows are this pass's. (The
  // position on the device and a segment mask's bounds are host copies, read before the wait too.)
  const int64_t stable = p.causal ? min(hi, past) : lo;

  const int64_t row_stride = p.hkv * kD;
  const KV* const k = static_cast<const KV*>(p.k) + kvh * kD + piece * kPerUnit;
  const KV* const v = static_cast<const KV*>(p.v) + kvh * kD + piece * kPerUnit;
  uint4 keys[kLoads], values[kLoads];
  // Rows of the tile at t0 in [from, to) (zeros elsewhere where `fill`); rows at or past `last` are never read.
  const auto load_tile = [&](int64_t t0, int64_t from, int64_t to, bool fill) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int64_t t = t0 + j * kRows + row_group;
      if (t >= from && t < to && t < last) {
        keys[j] = *reinterpret_cast<const uint4*>(k + t * row_stride);
        values[j] = *reinterpret_cast<const uint4*>(v + t * row_stride);
      } else if (fill) {
        keys[j] = values[j] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  int64_t t0 = first + int64_t(warp) * kTile;
  load_tile(t0, t0, stable, true);  // before the wait: only rows nothing in this pass writes
  wait_for_previous_kernel();
  load_tile(t0, max(t0, stable), last, false);
  float q[kHeads][kPerUnit];
#pragma unroll
  for (int g = 0; g < kHeads; ++g)
#pragma unroll
    for (int e = 0; e < kPerUnit; e += 4) {
      const float4 x = *reinterpret_cast<const float4*>(p.q + (i * p.hq + h0 + g) * kD + piece * kPerUnit + e);
      q[g][e] = x.x * p.scale, q[g][e + 1] = x.y * p.scale, q[g][e + 2] = x.z * p.scale, q[g][e + 3] = x.w * p.scale;
    }

  float best[kHeads], total[kHeads], acc[kHeads][kPerUnit];
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    best[g] = -INFINITY, total[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerUnit; ++e) acc[g][e] = 0.0f;
  }
  // The flat index of a lane's whole scores: value f = j·kHeads + g is row j of the tile's loads, query head g.
  const int holder = piece / kSpread;
  const bool counts = piece % kSpread == 0;  // lanes that hold a copy do not add it to the sums again
  for (; t0 < last; t0 += kWarps * kTile) {
    if (t0 != first + int64_t(warp) * kTile) load_tile(t0, t0, last, true);
    float x[kValues];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      float key[kPerUnit];
      Vec16<KV>::widen(keys[j], key);
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kPerUnit; ++e) dot += q[g][e] * key[e];
        x[j * kHeads + g] = dot;
      }
    }
    reduce_scatter<kValues, kLanes / 2>(x, lane);
    // x[c] is value holder·kKept + c: row j = f / kHeads of the loads, at key t0 + j·kRows + row_group.
    float next[kHeads];
#pragma unroll
    for (int g = 0; g < kHeads; ++g) next[g] = -INFINITY;
#pragma unroll
    for (int c = 0; c < kKept; ++c) {
      const int f = holder * kKept + c, j = f / kHeads, g = f % kHeads;
      if (t0 + j * kRows + row_group >= last) x[c] = -INFINITY;
#pragma unroll
      for (int h = 0; h < kHeads; ++h)
        if (h == g) next[h] = fmaxf(next[h], x[c]);
    }
    float correction[kHeads];
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      next[g] = fmaxf(best[g], warp_max(next[g]));  // finite: a tile's first key is always visible
      correction[g] = expf(best[g] - next[g]);     // 0 on the first tile
      best[g] = next[g];
      total[g] *= correction[g];
#pragma unroll
      for (int e = 0; e < kPerUnit; ++e) acc[g][e] *= correction[g];
    }
#pragma unroll
    for (int c = 0; c < kKept; ++c) {
      const int g = (holder * kKept + c) % kHeads;
      float m = best[0];
#pragma unroll
      for (int h = 1; h < kHeads; ++h)
        if (h == g) m = best[h];
      x[c] = x[c] == -INFINITY ? 0.0f : expf(x[c] - m);
#pragma unroll
      for (int h = 0; h < kHeads; ++h)
        if (h == g && counts) total[h] += x[c];
    }
    // Values: the probability of (row j, head g) from the lane holding it, times this lane's piece of row j.
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      float value[kPerUnit];
      Vec16<KV>::widen(values[j], value);
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        const int f = j * kHeads + g;
        const float prob = __shfl_sync(0xffffffffu, x[f % kKept], row_group * kLanes + f / kKept * kSpread);
#pragma unroll
        for (int e = 0; e < kPerUnit; ++e) acc[g][e] += prob * value[e];
      }
    }
  }
  // The warp's row groups hold different keys of the same dimensions: add them up; the sums over all lanes.
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
#pragma unroll
    for (int mask = kLanes; mask < 32; mask *= 2)
#pragma unroll
      for (int e = 0; e < kPerUnit; ++e) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], mask);
    total[g] = warp_sum(total[g]);
  }
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < kHeads; ++g) warp_best[warp][g] = best[g], warp_total[warp][g] = total[g];
  if (row_group == 0)
#pragma unroll
    for (int g = 0; g < kHeads; ++g)
#pragma unroll
      for (int e = 0; e < kPerUnit; e += 4)
        *reinterpret_cast<float4*>(&warp_acc[warp][g][piece * kPerUnit + e]) =
            make_float4(acc[g][e], acc[g][e + 1], acc[g][e + 2], acc[g][e + 3]);
  __syncthreads();

  // The block's result per head: its warps merged (a warp without keys has max -inf and adds nothing).
  if (threadIdx.x < kWarps * kHeads) {
    const int w = threadIdx.x / kHeads, g = threadIdx.x % kHeads;
    float m = -INFINITY;
#pragma unroll
    for (int x = 0; x < kWarps; ++x) m = fmaxf(m, warp_best[x][g]);
    warp_weight[w][g] = warp_best[w][g] == -INFINITY ? 0.0f : expf(warp_best[w][g] - m);
    if (w == 0) block_best[g] = m;
  }
  __syncthreads();
  // Each output's thread also sums its head's weighted totals itself (the same order, so the same bits, as one thread
  // a head did before behind a barrier of its own).
  float* const partials = p.partials + (i * p.hq + h0) * gridDim.x * (kD + 2);
  for (int e = threadIdx.x; e < kHeads * kD; e += kThreads) {
    const int g = e / kD, c = e % kD;
    float value = 0.0f, block_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      value += warp_weight[w][g] * warp_acc[w][g][c];
      block_sum += warp_weight[w][g] * warp_total[w][g];
    }
    if (used == 1) {
      p.out[(i * p.hq + h0 + g) * kD + c] = value / block_sum;
      continue;
    }
    float* const partial =
        kCluster ? cluster_slot + g * (kD + 2) : partials + (int64_t(g) * gridDim.x + chunk) * (kD + 2);
    partial[2 + c] = value;
    if (c == 0) partial[0] = block_best[g], partial[1] = block_sum;
  }
  if constexpr (kCluster) {
    merge_in_cluster<kHeads, kMaxClusterChunks>(cluster_slot, p.out + (i * p.hq + h0) * kD, kD, used);
    return;
  }
  if (used == 1 || !last_to_arrive(&p.arrivals[unit], unsigned(used))) return;
  combine_partials<kWarps, kHeads>(partials, p.out + (i * p.hq + h0) * kD, kD, used, gridDim.x);
  if (threadIdx.x == 0) p.arrivals[unit] = 0;
}

// Calls f(DecodeShape<...>{}) for the shape of `a` (attention_decode_fits holds).
template <typename KV, typename F>
void with_shape(const AttentionArgs& a, F&& f) {
  const int lanes = int(a.d * int64_t(sizeof(KV)) / 16), heads = int(a.hq / a.hkv);
  const auto by_heads = [&](auto lanes_constant) {
    constexpr int kLanes = decltype(lanes_constant)::value;
    if (heads == 1) f(DecodeShape<kLanes, 1, KV>{});
    else if (heads == 2) f(DecodeShape<kLanes, 2, KV>{});
    else if (heads == 4) f(DecodeShape<kLanes, 4, KV>{});
    else f(DecodeShape<kLanes, 8, KV>{});
  };
  if (lanes == 8) by_heads(std::integral_constant<int, 8>{});
  else if (lanes == 16) by_heads(std::integral_constant<int, 16>{});
  else by_heads(std::integral_constant<int, 32>{});
}

// Chunks: at most kFill blocks an SM (rounded down: one more would wait for a second wave), with a tile for every
// warp of a block at least; the merge keeps a weight per chunk and head in shared memory.
int64_t decode_chunks(const AttentionArgs& a, int multiprocessors) {
  int tile = 0, warps = 0, heads = 0;
  with_kv_type(a.kv_type, [&](auto element) {
    with_shape<decltype(element)>(a, [&](auto shape) {
      using Shape = decltype(shape);
      tile = Shape::kTile, warps = Shape::kWarps, heads = Shape::kHeads;
    });
  });
  const int64_t tiles = (a.kv_len + tile - 1) / tile;
  const int64_t wanted = kFill * multiprocessors / (a.s * a.hkv);
  return std::clamp<int64_t>(std::min(wanted, (tiles + warps - 1) / warps), 1, kMaxChunks / heads);
}

}  // namespace

bool attention_decode_fits(const AttentionArgs& a) {
  const int64_t row_bytes = a.d * (a.kv_type == WeightType::F32 ? 4 : 2), group = a.hkv > 0 ? a.hq / a.hkv : 0;
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return !a.layout && (row_bytes == 128 || row_bytes == 256 || row_bytes == 512) && a.hkv * group == a.hq &&
         (group == 1 || group == 2 || group == 4 || group == 8) && aligned(a.q) && aligned(a.k) && aligned(a.v);
}

int64_t attention_decode_workspace(const AttentionArgs& a, int multiprocessors) {
  if (!attention_decode_fits(a)) throw std::runtime_error("attention_decode: a shape it does not take");
  return split_workspace_floats(a.s * a.hq, decode_chunks(a, multiprocessors), a.d);
}

void attention_decode(const AttentionArgs& a, const SplitDecode& split, cudaStream_t stream) {
  if (!attention_decode_fits(a)) throw std::runtime_error("attention_decode: a shape it does not take");
  const DecodeParams params{.q = a.q,
                            .k = a.k,
                            .v = a.v,
                            .out = a.out,
                            .partials = split.workspace,
                            .arrivals = split.arrivals,
                            .s = a.s,
                            .hq = a.hq,
                            .hkv = a.hkv,
                            .kv_len = a.kv_len,
                            .past = a.past,
                            .past_on_device = split.past_on_device,
                            .causal = a.causal,
                            .bounds = a.bounds,
                            .segments = a.segments,
                            .scale = a.scale};
  const dim3 grid(unsigned(decode_chunks(a, split.multiprocessors)), unsigned(a.s * a.hkv));
  with_kv_type(a.kv_type, [&](auto element) {
    using KV = decltype(element);
    with_shape<KV>(a, [&](auto shape) {
      using Shape = decltype(shape);
      // A (query, kv head)'s chunks as one cluster where every pair's cluster is resident at once (a second wave
      // would wait for the first); a single chunk needs no merge. Clusters come with the profile's overlapped
      // launches, SM90's other decode feature: the SM61 profile forced on an H100 runs Pascal's path.
      const auto clustered = attention_decode_kernel<Shape, KV, true>;
      if (split.overlap && grid.x <= unsigned(kMaxClusterChunks) &&
          cluster_fits(reinterpret_cast<const void*>(clustered), Shape::kThreads, grid.x, grid.y))
        launch_kernel_clustered(clustered, grid, dim3(Shape::kThreads), 0, stream, split.overlap, grid.x, params);
      else
        launch_kernel(attention_decode_kernel<Shape, KV, false>, grid, dim3(Shape::kThreads), 0, stream, split.overlap,
                      params);
    });
  });
}

}  // namespace qvl::cuda
