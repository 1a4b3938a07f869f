// Two kernels, only while a view is open, recorded into every decode step (so they must be short next to the step's
// ~1.9 ms on the 2B shapes). The first splits the keys over (split, head) blocks, as split-KV decode attention does:
// each warp walks a few keys for an online softmax maximum and sum, and keeps the raw scores of the image's rows;
// the second (one block) merges each head's partial maxima and sums, turns the kept scores into probabilities, takes
// the mean over the heads and scales it to 0..255.
// Why split: one block per head (the first version) left 16 blocks on 132 SMs walking every key in turn, 34 us at 256
// keys and 236 us at 4,096 (H200), 2-3% of a 2B decode step at short context and 12% at 4,096.
#include "attention_tap.cuh"

#include <algorithm>

#include "common.cuh"
#include "kv_cache.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int64_t kKeysPerWarp = 8;  // a few dependent dot products a warp: the split count follows from it
constexpr int kMaxSplits = 256;

__device__ int64_t keys_in_cache(const AttentionTapArgs& a) {
  // A position read from the device is bounded by the cache (the CPU reference refuses one past it).
  return a.past ? min(max(*a.past + 1, int64_t(1)), a.capacity) : a.kv_len;
}

__device__ float key_dot(const AttentionTapArgs& a, int h, int64_t j, int lane) {
  const float* q = a.q + int64_t(h) * a.head_dim;
  const int64_t row = (j * a.kv_heads + h / (a.heads / a.kv_heads)) * a.head_dim;
  const auto dot_with = [&](const auto* k) {
    float sum = 0;
    for (int e = lane; e < a.head_dim; e += 32) sum += q[e] * load_kv(k + e);
    return sum;
  };
  float dot = a.kv_bf16 ? dot_with(static_cast<const uint16_t*>(a.cache_k) + row)  // the same branch in every thread
                        : dot_with(static_cast<const float*>(a.cache_k) + row);
  for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  return dot * a.scale;
}

// Block (split, head slot): keys [split * per_split, ...) up to the cache's length.
__global__ void tap_scores(AttentionTapArgs a, int64_t per_split) {
  const int slot = blockIdx.y, h = a.head < 0 ? slot : a.head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kv_len = keys_in_cache(a);
  const int64_t begin = int64_t(blockIdx.x) * per_split, end = min(begin + per_split, kv_len);
  float top = -INFINITY, sum = 0;
  float* scores = a.scores + int64_t(slot) * a.count;
  for (int64_t j = begin + warp; j < end; j += kWarps) {
    const float s = key_dot(a, h, j, lane);
    if (lane == 0 && j >= a.first && j < a.first + a.count) scores[j - a.first] = s;
    if (s > top) {
      sum = sum * __expf(top - s) + 1;
      top = s;
    } else {
      sum += __expf(s - top);
    }
  }
  __shared__ float tops[kWarps], sums[kWarps];
  if (lane == 0) tops[warp] = top, sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float m = -INFINITY, z = 0;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, tops[w]);
  for (int w = 0; w < kWarps; ++w)
    if (sums[w] > 0) z += sums[w] * __expf(tops[w] - m);
  float* partial = a.partials + (int64_t(slot) * gridDim.x + blockIdx.x) * 2;
  partial[0] = m;  // -inf and 0 for a split past the cache's end
  partial[1] = z;
}

__global__ void tap_heat(AttentionTapArgs a, int used, int splits) {
  __shared__ float head_top[kMaxTapHeads], head_sum[kMaxTapHeads], partial[256];
  for (int slot = threadIdx.x; slot < used; slot += blockDim.x) {
    float m = -INFINITY, z = 0;
    const float* p = a.partials + int64_t(slot) * splits * 2;
    for (int s = 0; s < splits; ++s) m = fmaxf(m, p[2 * s]);
    for (int s = 0; s < splits; ++s)
      if (p[2 * s + 1] > 0) z += p[2 * s + 1] * __expf(p[2 * s] - m);
    head_top[slot] = m;
    head_sum[slot] = z;
  }
  __syncthreads();
  const int64_t kv_len = keys_in_cache(a);
  float largest = 0;
  for (int64_t i = threadIdx.x; i < a.count; i += blockDim.x) {
    float v = 0;
    if (a.first + i < kv_len)
      for (int slot = 0; slot < used; ++slot)
        v += __expf(a.scores[int64_t(slot) * a.count + i] - head_top[slot]) / head_sum[slot];
    v /= float(used);
    a.heat[i] = v;
    largest = fmaxf(largest, v);
  }
  partial[threadIdx.x] = largest;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + stride]);
    __syncthreads();
  }
  const float top = partial[0];
  for (int64_t i = threadIdx.x; i < a.count; i += blockDim.x) a.heat[i] = top > 0 ? rintf(255.0f * a.heat[i] / top) : 0.0f;
}

}  // namespace

int attention_tap_splits(int64_t capacity) {
  const int64_t per_block = kWarps * kKeysPerWarp;
  return int(std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, (capacity + per_block - 1) / per_block)));
}

void attention_tap(const AttentionTapArgs& args, cudaStream_t stream) {
  const int used = args.head < 0 ? args.heads : 1;
  // The split is fixed by the cache's capacity (the key count may only be known on the device, in a recorded step);
  // splits past the keys there end at once.
  const int splits = attention_tap_splits(args.capacity);
  const int64_t per_split = (args.capacity + splits - 1) / splits;
  tap_scores<<<dim3(unsigned(splits), unsigned(used)), kWarps * 32, 0, stream>>>(args, per_split);
  CUDA_CHECK_LAUNCH();
  tap_heat<<<1, 256, 0, stream>>>(args, used, splits);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
