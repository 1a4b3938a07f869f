#pragma once
// Tiled attention for many queries (prefill, the vision tower): out [S, Hq, D] = softmax(q·kᵀ·scale + mask)·v for
// q [S, Hq, D], k/v [T, Hkv, D], causal (with `past` earlier keys) or block-diagonal segments (`bounds` on the
// device, S + 1 ascending entries). Needs D % 4 == 0 and D <= 128 (flash_attention_fits); GQA by head / group.
// Causal may be block-sparse: `layout` (on the device, layout_side² entries, 0/1) says which kFlashLayoutBlock-key
// block each query block of as many positions sees (AttentionMask::block_layout; nullptr: dense).
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

inline constexpr int64_t kFlashLayoutBlock = 64;

bool flash_attention_fits(int64_t d);
void flash_attention(const float* q, const float* k, const float* v, float* out, int64_t s, int64_t hq, int64_t hkv,
                     int64_t d, int64_t kv_len, bool causal, int64_t past, const int64_t* bounds, int64_t segments,
                     float scale, const int64_t* layout, int64_t layout_side, cudaStream_t stream);

}  // namespace qvl::cuda
