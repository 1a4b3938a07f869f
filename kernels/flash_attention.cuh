#pragma once
// Tiled attention for many queries (prefill, the vision tower): out [S, Hq, D] = softmax(q·kᵀ·scale + mask)·v for
// q [S, Hq, D], k/v [T, Hkv, D], causal (with `past` earlier keys) or block-diagonal segments (`bounds` on the
// device, S + 1 ascending entries). Needs D % 4 == 0 and D <= 128 (flash_attention_fits); GQA by head / group.
// Causal may be block-sparse: `layout` (on the device, layout_side² entries, 0/1) says which kFlashLayoutBlock-key
// block each query block of as many positions sees (AttentionMask::block_layout; nullptr: dense).
#include <cuda_runtime.h>

#include <cstdint>

#include "attention_args.h"

namespace qvl::cuda {

inline constexpr int64_t kFlashLayoutBlock = 64;

bool flash_attention_fits(int64_t d);
void flash_attention(const AttentionArgs& a, cudaStream_t stream);

}  // namespace qvl::cuda
