// Two kernels, only while a view is open. The first takes one block per head: its warps walk the keys once for the
// softmax's maximum and sum (online), then once more over the image's rows for their probabilities. At 4,096 keys of
// 128 dimensions that is 2 MB of keys a head, read from L2 after the step's own attention brought them in. The second
// takes one block for the mean over the heads and the scaling to 0..255.
#include "attention_tap.cuh"
#include "common.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 8;

__device__ float key_dot(const AttentionTapArgs& a, int h, int64_t j, int lane) {
  const float* q = a.q + int64_t(h) * a.head_dim;
  const float* k = a.cache_k + (j * a.kv_heads + h / (a.heads / a.kv_heads)) * a.head_dim;
  float dot = 0;
  for (int e = lane; e < a.head_dim; e += 32) dot += q[e] * k[e];
  for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  return dot * a.scale;
}

__global__ void tap_heads(AttentionTapArgs a) {
  const int h = a.head < 0 ? int(blockIdx.x) : a.head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // A position read from the device is bounded by the cache (the CPU reference refuses one past it).
  const int64_t kv_len = a.past ? min(max(*a.past + 1, int64_t(1)), a.capacity) : a.kv_len;
  float top = -INFINITY, sum = 0;
  for (int64_t j = warp; j < kv_len; j += kWarps) {
    const float s = key_dot(a, h, j, lane);
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
  float m = -INFINITY, z = 0;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, tops[w]);
  for (int w = 0; w < kWarps; ++w)
    if (sums[w] > 0) z += sums[w] * __expf(tops[w] - m);
  float* probs = a.probs + int64_t(blockIdx.x) * a.count;
  for (int64_t i = warp; i < a.count; i += kWarps) {
    const int64_t j = a.first + i;
    const float p = j < kv_len ? __expf(key_dot(a, h, j, lane) - m) / z : 0.0f;
    if (lane == 0) probs[i] = p;
  }
}

__global__ void tap_heat(AttentionTapArgs a, int used) {
  __shared__ float partial[256];
  float largest = 0;
  for (int64_t i = threadIdx.x; i < a.count; i += blockDim.x) {
    float v = 0;
    for (int h = 0; h < used; ++h) v += a.probs[int64_t(h) * a.count + i];
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

void attention_tap(const AttentionTapArgs& args, cudaStream_t stream) {
  const int used = args.head < 0 ? args.heads : 1;
  tap_heads<<<used, kWarps * 32, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
  tap_heat<<<1, 256, 0, stream>>>(args, used);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
