#pragma once
// The tensor-core attention's block shapes and the shared memory they take. Plain C++: flash_attention_mma.cu
// chooses its launch by it, and the host tests check that every shape it chooses fits the GPUs' limits.
#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

// A key group's staging buffers: the f16 K and V tiles ([64][d + 8]: the pad keeps a fragment load's rows in
// different banks) and the raw tiles as the copies bring them ([64][d], f32 or bf16); f16 keys and values are copied
// into the f16 tiles as they are, so a group has two stages of those instead (the next tile's copies go into one
// while the warps compute on the other).
constexpr int flash_group_shared_bytes(int64_t d, WeightType kv) {
  constexpr int kKeys = 64;  // a key tile (kFlashLayoutBlock)
  const int64_t tiles = 2 * kKeys * (d + 8) * 2;
  return int(kv == WeightType::F16 ? 2 * tiles : tiles + 2 * kKeys * d * (kv == WeightType::BF16 ? 2 : 4));
}

// How many key groups a block of the tensor-core attention has: 2 (64 queries, 4 row warps in each group) for a
// causal grid short of 8-warp blocks (fewer than `multiprocessors` blocks of 128 queries), where both groups' buffers
// fit the `shared_per_block` bytes a block may ask for; else 1 (128 queries, 8 row warps). Two groups take 132 KB at
// d = 128 from a bf16 cache, 136 KB from f16 keys and values and 196 KB from f32 ones: past an SM86/89 block's 99 KB
// (A100: 163 KB), where one group's 98 KB at most fits every head size.
inline int flash_key_groups(int64_t s, int64_t hq, int64_t d, WeightType kv, bool causal, int multiprocessors,
                            int shared_per_block) {
  constexpr int64_t kWideQueries = 128;
  const int64_t wide_blocks = (s + kWideQueries - 1) / kWideQueries * hq;
  const bool fits = 2 * flash_group_shared_bytes(d, kv) <= shared_per_block;
  return causal && wide_blocks < multiprocessors && fits ? 2 : 1;
}

}  // namespace qvl::cuda
