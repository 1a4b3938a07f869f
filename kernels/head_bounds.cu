// The output head's bounded pick, greedy or top-k's candidates (head_bounds.cuh says what and why).
//
// The bound. For a row r and a group g of 128 inputs, let s = the group's scale and q = rint(fl(w / s)), so that
// |fl(w / s)| <= 127 (1 + u)^2 < 127.5 and |w - s q| <= s (0.5 + 127.5 u), u = 2^-24. With H_g = sum over the group
// of |x|, the exact products differ by |sum w x - sum s q x| <= (0.5 + 127.5 u) sum_g s_g H_g. The head's GEMV and
// this pass each round a sum of at most 4,096 products (fused or not, in any order), off by at most
// gamma = n u / (1 - n u) <= 2.45e-4 of the sum of the products' magnitudes; those are at most 127.5 s |x| and 127 s
// |x| a value. So both computed products lie within (0.5 + 2.45e-4 (127.5 + 127) + 127.5 u) sum_g s_g H_g
// = 0.5624 sum_g s_g H_g of each other, before the rounding of this pass's sums of scales times H (relative, a few u).
// kBoundFactor = 0.6 leaves room for those and for the upper and lower bounds' own rounding (a relative u of a, and
// |a| <= 127 sum s H). kBoundFloor covers subnormal underflow (at most ~4,096 of 2^-149 in any sum). A bound that is
// not finite or above kBoundCeiling (where sums might overflow), or a product that is not finite (a lane's sum of q x,
// taken before its scale, can overflow where x is huge however small the scale), makes its row a candidate whatever
// its value, and leaves it out of the lower bounds.
//
// The bytes (the 2B): 311 MB of int8 and 10 MB of scales where the head's GEMV read 622 MB; the candidates' rows,
// 4 KB each, from the head itself.
#include "head_bounds.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>

#include "common.cuh"
#include "gemv_kernel.cuh"  // gemv_warps_per_row: the head's GEMV's order of sums
#include "pick_merge.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kSlab = 512;  // int8 values a warp reads with one 16-byte load a lane
constexpr int kGroupsPerSlab = int(kSlab / kHeadBoundsGroup);
constexpr int kMaxBoundsBlocks = 1024;
constexpr int kPickPerThread = 8, kPickChunk = kThreads * kPickPerThread;
constexpr float kBoundFactor = 0.6f, kBoundFloor = 1e-30f, kBoundCeiling = 1e30f;

struct BoundsWorkspace {
  float lower[kMaxBoundsBlocks];  // each bounds block's largest lower bound
  unsigned arrivals;
  float threshold;  // the k-th largest of `lower` (k 1 for greedy): a lower bound of the k-th largest logit
  unsigned padding[2];
};
static_assert(sizeof(BoundsWorkspace) % 16 == 0, "the pick's workspace follows, 16-byte aligned");

__device__ void* pick_workspace(void* w) { return static_cast<char*>(w) + sizeof(BoundsWorkspace); }

// ---- The copy ----

// A warp a group: each lane 4 values (a row's last group may be shorter: its upper lanes idle).
template <typename W>
__global__ void __launch_bounds__(kThreads) copy_kernel(HeadBoundsCopy c) {
  const int64_t groups = (c.width + kHeadBoundsGroup - 1) / kHeadBoundsGroup;
  const int64_t group = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (group >= c.rows * groups) return;  // a whole warp: a block's threads are whole warps
  const int64_t column = group % groups * kHeadBoundsGroup + lane * 4, at = group / groups * c.width + column;
  const bool inside = column < c.width;  // the width is a multiple of 16: a lane's 4 values are all in or all out
  const W* w = static_cast<const W*>(c.weight) + at;
  float v[4];
  bool finite = true;
  float largest = 0.0f;
  for (int e = 0; e < 4; ++e) {
    v[e] = inside ? widen(w[e]) : 0.0f;
    finite = finite && isfinite(v[e]);
    largest = fmaxf(largest, fabsf(v[e]));
  }
  finite = __all_sync(0xffffffffu, finite);
  largest = warp_max(largest);
  float scale = largest / 127.0f;
  // A scale that is not a normal float would round values far off: the group's rows are always candidates instead.
  if (!finite || (largest > 0.0f && !(scale >= 1.17549435e-38f))) scale = INFINITY;
  char4 q{0, 0, 0, 0};
  if (largest > 0.0f && scale != INFINITY) {
    const auto quantise = [&](float x) { return char(fminf(127.0f, fmaxf(-127.0f, rintf(x / scale)))); };
    q = {quantise(v[0]), quantise(v[1]), quantise(v[2]), quantise(v[3])};
  }
  if (inside) *reinterpret_cast<char4*>(c.values + at) = q;
  if (lane == 0) c.scales[group] = scale;
}

// ---- The bounds ----

// Four int8 values to floats, exactly: each byte (biased to unsigned) becomes the low mantissa byte of 2^23, one
// byte permute and one add a value (the CUDA programming guide lists int-to-float conversion at a quarter of the FP32 rate or less; not measured here).
__device__ __forceinline__ void widen_int8(uint32_t word, float* out) {
  const uint32_t biased = word ^ 0x80808080u;
#pragma unroll
  for (int b = 0; b < 4; ++b) out[b] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u + b)) - 8388736.0f;
}

// Each warp takes rows warp, warp + all warps, ...: its lanes' slices of x (16 values a 512-wide slab) stay in
// registers over all its rows, and the next row's 16-byte loads are in flight while a row is summed. Launched
// overlapped: the first row's values are asked for before the wait.
// A width short of whole slabs leaves the last slab's upper lanes idle (their values and scales 0).
template <int kSlabs>
__global__ void __launch_bounds__(kThreads, kSlabs <= 4 ? 2 : 1) bounds_kernel(HeadBoundsPickArgs a) {
  const int width = int(a.copy.width), groups = int((width + kHeadBoundsGroup - 1) / kHeadBoundsGroup);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = a.vocabulary, warps = int64_t(gridDim.x) * kWarps;
  int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  // Whether this lane's 16 values of slab sl lie within the row: only the last slab may be short.
  const bool last_inside = (kSlabs - 1) * kSlab + lane * 16 < width;
  const auto active = [&](int sl) { return sl < kSlabs - 1 || last_inside; };
  uint4 next[kSlabs];
  float next_scale[kSlabs];
  const auto load = [&](int64_t r) {
    const int8_t* values = a.copy.values + r * width + lane * 16;
    const float* scales = a.copy.scales + r * groups + lane / 8;
#pragma unroll
    for (int sl = 0; sl < kSlabs; ++sl) {
      next[sl] = active(sl) ? __ldcs(reinterpret_cast<const uint4*>(values + sl * kSlab)) : make_uint4(0, 0, 0, 0);
      next_scale[sl] = active(sl) ? scales[sl * kGroupsPerSlab] : 0.0f;  // (values streamed: read once a step)
    }
  };
  allow_next_kernel();
  if (row < rows) load(row);
  wait_for_previous_kernel();
  float x[kSlabs][16], magnitude[kSlabs];  // this lane's 16 values of each slab, and the sum of their magnitudes
#pragma unroll
  for (int sl = 0; sl < kSlabs; ++sl) {
    const float4* x4 = reinterpret_cast<const float4*>(a.x + sl * kSlab + lane * 16);
    magnitude[sl] = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 f = active(sl) ? x4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      x[sl][4 * j] = f.x, x[sl][4 * j + 1] = f.y, x[sl][4 * j + 2] = f.z, x[sl][4 * j + 3] = f.w;
    }
#pragma unroll
    for (int e = 0; e < 16; ++e) magnitude[sl] += fabsf(x[sl][e]);
  }
  float largest_lower = -INFINITY;
  for (; row < rows; row += warps) {
    uint4 values[kSlabs];
    float scale[kSlabs];
#pragma unroll
    for (int sl = 0; sl < kSlabs; ++sl) values[sl] = next[sl], scale[sl] = next_scale[sl];
    if (row + warps < rows) load(row + warps);
    float product = 0.0f, bound = 0.0f;
#pragma unroll
    for (int sl = 0; sl < kSlabs; ++sl) {
      float q[16];
      widen_int8(values[sl].x, q), widen_int8(values[sl].y, q + 4), widen_int8(values[sl].z, q + 8),
          widen_int8(values[sl].w, q + 12);
      float partial = 0.0f;
#pragma unroll
      for (int e = 0; e < 16; ++e) partial = fmaf(q[e], x[sl][e], partial);
      product = fmaf(scale[sl], partial, product);
      bound = fmaf(scale[sl], magnitude[sl], bound);
    }
    product = warp_sum(product);
    bound = fmaf(warp_sum(bound), kBoundFactor, kBoundFloor);
    // A finite product: no lane's sum of q·x (taken before its scale) overflowed, nor the warp's. Otherwise, or with
    // a bound that is NaN or past the ceiling, the row is always a candidate and bounds nothing from below.
    const bool sound = bound <= kBoundCeiling && isfinite(product);
    if (lane == 0) a.logits[row] = sound ? product + bound : INFINITY;
    if (sound) largest_lower = fmaxf(largest_lower, product - bound);
  }
  // The blocks' largest lower bounds, merged by the last block.
  BoundsWorkspace* const ws = static_cast<BoundsWorkspace*>(a.workspace);
  __shared__ float warp_lower[kWarps];
  if (lane == 0) warp_lower[warp] = largest_lower;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) largest_lower = fmaxf(largest_lower, warp_lower[w]);
    ws->lower[blockIdx.x] = largest_lower;
  }
  if (!last_to_arrive(&ws->arrivals, gridDim.x)) return;
  // The k-th largest of the blocks' values, equal values counted apart (by block): the block whose value has k - 1
  // others before it. With fewer blocks than k, -inf (every row a candidate).
  __shared__ float maxima[kMaxBoundsBlocks];
  const int blocks = int(gridDim.x), k = a.top_k > 0 ? a.top_k : 1;
  for (int b = threadIdx.x; b < blocks; b += kThreads) maxima[b] = __ldcg(&ws->lower[b]);
  __syncthreads();
  for (int b = threadIdx.x; b < blocks; b += kThreads) {
    const float v = maxima[b];
    int before = 0;
    for (int i = 0; i < blocks; ++i) before += maxima[i] > v || (maxima[i] == v && i < b);
    if (before == k - 1) ws->threshold = v;
  }
  if (threadIdx.x != 0) return;
  if (blocks < k) ws->threshold = -INFINITY;
  ws->arrivals = 0;
}

// ---- The candidates ----

// Row r's product as the head's GEMV computes it (gemv_kernel.cuh, one row of x, `split` warps a row, no bias): each
// slice's lanes sum their vectors in order, the slices' warp sums are added in order, then the bias's 0.
template <typename W>
__device__ float gemv_row_product(const float* x, const W* w, int k, int split, int lane) {
  constexpr int kVec = Vec16<W>::kCount, kBatch = 8;
  const int stride = 32 * kVec * split;
  float sum = 0.0f;
  for (int slice = 0; slice < split; ++slice) {
    float acc = 0.0f;
    for (int base = (lane + 32 * slice) * kVec; base < k; base += stride * kBatch) {
      uint4 wa[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = base + u * stride;
        if (i < k) wa[u] = *reinterpret_cast<const uint4*>(w + i);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = base + u * stride;
        if (i >= k) break;
        float a[kVec];
        Vec16<W>::widen(wa[u], a);
        const float4* x4 = reinterpret_cast<const float4*>(x + i);
#pragma unroll
        for (int j = 0; j < kVec / 4; ++j) {
          const float4 xv = x4[j];
          const float xj[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) acc += xj[e] * a[4 * j + e];
        }
      }
    }
    const float s = warp_sum(acc);
    sum = slice == 0 ? s : sum + s;
  }
  return sum + 0.0f;
}

// float(v / temperature) as top-k computes it (core/top_k.h: double division).
__device__ __forceinline__ float over_temperature(float v, double temperature) { return float(double(v) / temperature); }

// A block takes 2,048 upper bounds at a time (8 a thread, like greedy_pick.cu), lists the rows whose bound is not
// below the threshold, and computes those rows' logits a warp each. Greedy: the blocks' bests are merged into the
// pick. Top-k: the rows not listed get -inf.
template <typename W>
__global__ void __launch_bounds__(kThreads) candidates_kernel(HeadBoundsPickArgs a, int gemv_split) {
  __shared__ int listed[kPickChunk];
  __shared__ int listed_count;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = a.vocabulary;
  const W* const head = static_cast<const W*>(a.copy.weight);
  const int k = int(a.copy.width);
  wait_for_previous_kernel();
  const float threshold = __ldcg(&static_cast<const BoundsWorkspace*>(a.workspace)->threshold);
  const bool top_k = a.top_k > 0;
  // Greedy compares the bounds themselves; top-k their values over the temperature, where a logit below the k-th
  // largest may round to the same value (and tie with it).
  const float threshold_t = top_k ? over_temperature(threshold, a.temperature) : threshold;
  PickBest best{-INFINITY, 0, rows};
  for (int64_t chunk = int64_t(blockIdx.x) * kPickChunk; chunk < rows; chunk += int64_t(gridDim.x) * kPickChunk) {
    if (threadIdx.x == 0) listed_count = 0;
    __syncthreads();
    float upper[kPickPerThread];
#pragma unroll
    for (int u = 0; u < kPickPerThread; ++u) {
      const int64_t i = chunk + threadIdx.x + u * kThreads;
      upper[u] = i < rows ? __ldcg(a.logits + i) : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kPickPerThread; ++u) {
      const int offset = int(threadIdx.x) + u * kThreads;
      if (chunk + offset >= rows) continue;
      const float bound = top_k ? over_temperature(upper[u], a.temperature) : upper[u];
      if (!(bound < threshold_t)) listed[atomicAdd(&listed_count, 1)] = offset;
      else if (top_k) a.logits[chunk + offset] = -INFINITY;
    }
    __syncthreads();
    const int count = listed_count;
    for (int c = warp; c < count; c += kWarps) {
      const int64_t r = chunk + listed[c];
      const float logit = gemv_row_product(a.x, head + r * k, k, gemv_split, lane);
      if (lane == 0) {
        a.logits[r] = logit;
        best = better(best, {logit, isnan(logit) ? 1 : 0, r});  // listed in no order: ties go by index
      }
    }
    __syncthreads();  // `listed` is written again
  }
  if (!top_k) merge_block_picks<kThreads>(best, rows, pick_workspace(a.workspace), a.pick);
}

template <typename W>
void launch_pick(const HeadBoundsPickArgs& a, bool overlap, cudaStream_t stream) {
  const int slabs = int((a.copy.width + kSlab - 1) / kSlab);
  const int per_sm = slabs <= 4 ? 2 : 1;
  const int64_t bounds_blocks =
      std::clamp<int64_t>((a.vocabulary + kWarps - 1) / kWarps, 1, std::min(kMaxBoundsBlocks, per_sm * a.multiprocessors));
  const auto bounds = [&](auto kernel) {
    launch_kernel(kernel, dim3(unsigned(bounds_blocks)), dim3(kThreads), 0, stream, overlap, a);
  };
  switch (slabs) {
    case 1: bounds(bounds_kernel<1>); break;
    case 2: bounds(bounds_kernel<2>); break;
    case 3: bounds(bounds_kernel<3>); break;
    case 4: bounds(bounds_kernel<4>); break;
    case 5: bounds(bounds_kernel<5>); break;
    case 6: bounds(bounds_kernel<6>); break;
    case 7: bounds(bounds_kernel<7>); break;
    default: bounds(bounds_kernel<8>); break;
  }
  const int64_t pick_blocks =
      std::clamp<int64_t>((a.vocabulary + kPickChunk - 1) / kPickChunk, 1, kMaxPickBlocks<kThreads>);
  // The GEMV's warps a row for the whole head (its rows, not the vocabulary): the products must be its bits.
  const int split = gemv_warps_per_row(a.copy.rows, a.copy.width, Vec16<W>::kCount);
  launch_kernel(candidates_kernel<W>, dim3(unsigned(pick_blocks)), dim3(kThreads), 0, stream, overlap, a, split);
}

}  // namespace

bool head_bounds_fit(WeightType w_type, int64_t width) {
  return (w_type == WeightType::BF16 || w_type == WeightType::F16) && width > 0 && width % 16 == 0 &&
         width <= kHeadBoundsMaxWidth;
}

void make_head_bounds(const HeadBoundsCopy& c, cudaStream_t stream) {
  if (!head_bounds_fit(c.w_type, c.width)) throw std::runtime_error("make_head_bounds: a head it does not take");
  const int64_t threads = c.rows * ((c.width + kHeadBoundsGroup - 1) / kHeadBoundsGroup) * 32;
  const dim3 grid(unsigned((threads + kThreads - 1) / kThreads));
  if (c.w_type == WeightType::BF16) copy_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(c);
  else copy_kernel<__half><<<grid, kThreads, 0, stream>>>(c);
  CUDA_CHECK_LAUNCH();
}

int64_t head_bounds_workspace_bytes() {
  return int64_t(sizeof(BoundsWorkspace)) + pick_merge_workspace_bytes<kThreads>();
}

void head_bounds_pick(const HeadBoundsPickArgs& a, bool overlap, cudaStream_t stream) {
  if (!head_bounds_fit(a.copy.w_type, a.copy.width) || a.vocabulary <= 0 || a.vocabulary > a.copy.rows ||
      a.top_k < 0 || a.top_k > kMaxBoundsBlocks || !(a.temperature > 0))
    throw std::runtime_error("head_bounds_pick: a head, vocabulary or top-k it does not take");
  if (a.copy.w_type == WeightType::BF16) launch_pick<uint16_t>(a, overlap, stream);
  else launch_pick<__half>(a, overlap, stream);
}

}  // namespace qvl::cuda
