#pragma once
// The tensor-core attention's block shapes and the shared memory they take. Plain C++: flash_attention_mma.cu
// chooses its launch by it, and the host tests check that every shape it chooses fits the GPUs' limits.
#include <cstdint>

namespace qvl::cuda {

// A key group's staging buffers: the f16 K and V tiles ([64][d + 8]: the pad keeps a fragment load's rows in
// different banks) and the raw tiles as the copies bring them ([64][d], f32 or bf16).
constexpr int flash_group_shared_bytes(int64_t d, bool kv_bf16) {
  constexpr int kKeys = 64;  // a key tile (kFlashLayoutBlock)
  return int(2 * kKeys * (d + 8) * 2 + 2 * kKeys * d * (kv_bf16 ? 2 : 4));
}

// How many key groups a block of the tensor-core attention has: 2 (64 queries, 4 row warps in each group) for a
// causal grid short of 8-warp blocks (fewer than `multiprocessors` blocks of 128 queries), where both groups' buffers
// fit the `shared_per_block` bytes a block may ask for; else 1 (128 queries, 8 row warps). Two groups take 132 KB at
// d = 128 from a bf16 cache and 196 KB from an f32 one: past an SM86/89 block's 99 KB (A100: 163 KB), where one
// group's 98 KB at most fits every head size.
inline int flash_key_groups(int64_t s, int64_t hq, int64_t d, bool kv_bf16, bool causal, int multiprocessors,
                            int shared_per_block) {
  constexpr int64_t kWideQueries = 128;
  const int64_t wide_blocks = (s + kWideQueries - 1) / kWideQueries * hq;
  const bool fits = 2 * flash_group_shared_bytes(d, kv_bf16) <= shared_per_block;
  return causal && wide_blocks < multiprocessors && fits ? 2 : 1;
}

}  // namespace qvl::cuda
