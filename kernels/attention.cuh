#pragma once
// out [S, Hq, D] = softmax(q·kᵀ·scale + mask)·v for q [S, Hq, D] and k, v [T, Hkv, D] (GQA: query head h reads kv
// head h / (Hq / Hkv)). Masks: causal with `past` earlier tokens, or block-diagonal segments (`bounds`, S + 1 entries
// on the device, ascending, 0 ... S). split_keys: one block of warps per (query, head) pair, for when there are too
// few pairs to fill the GPU with a warp each (decode).
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

void attention(const float* q, const float* k, const float* v, float* out, int64_t s, int64_t hq, int64_t hkv, int64_t d,
               int64_t kv_len, bool causal, int64_t past, const int64_t* bounds, int64_t segments, float scale,
               bool split_keys, cudaStream_t stream);

}  // namespace qvl::cuda
