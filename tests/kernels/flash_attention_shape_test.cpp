// The tensor-core attention's block shapes against the shared memory GPUs give a block: the two-group shape only
// where both groups' buffers fit, and the one-group shape fitting the smallest limit of the GPUs it runs on.
#include "flash_attention_shape.h"

#include <gtest/gtest.h>

namespace qvl::cuda {
namespace {

// Bytes a block may opt in to: SM86/89 (RTX 30/40), SM80 (A100), SM90 (H100/H200).
constexpr int kSm86 = 99 * 1024, kSm80 = 163 * 1024, kSm90 = 227 * 1024;

TEST(FlashAttentionShape, EveryChosenBlockFitsTheGpusSharedMemory) {
  for (int64_t d = 16; d <= 128; d += 16)
    for (WeightType kv : {WeightType::F32, WeightType::BF16, WeightType::F16}) {
      SCOPED_TRACE("d " + std::to_string(d) + " kv type " + std::to_string(int(kv)));
      EXPECT_LE(flash_group_shared_bytes(d, kv), kSm86) << "one group must fit every tensor-core GPU";
      for (int limit : {kSm86, kSm80, kSm90}) {
        const int groups = flash_key_groups(237, 16, d, kv, true, 132, limit);  // a short causal grid
        EXPECT_LE(groups * flash_group_shared_bytes(d, kv), limit) << "limit " << limit;
        EXPECT_EQ(groups, 2 * flash_group_shared_bytes(d, kv) <= limit ? 2 : 1) << "limit " << limit;
      }
    }
  // The cases that motivated the check: the decoder's d = 128 from a bf16 cache takes 132 KB with two groups.
  EXPECT_EQ(flash_key_groups(512, 16, 128, WeightType::BF16, true, 82, kSm86), 1);
  EXPECT_EQ(flash_key_groups(512, 16, 128, WeightType::BF16, true, 108, kSm80), 2);
  EXPECT_EQ(flash_key_groups(512, 16, 128, WeightType::F32, true, 108, kSm80), 1);
}

TEST(FlashAttentionShape, TwoGroupsOnlyForCausalGridsShortOfBlocks) {
  constexpr WeightType kBf16 = WeightType::BF16;
  EXPECT_EQ(flash_key_groups(512, 16, 128, kBf16, true, 132, kSm90), 2);    // 64 blocks of 128 queries < 132 SMs
  EXPECT_EQ(flash_key_groups(1100, 16, 128, kBf16, true, 132, kSm90), 1);   // 144 blocks
  EXPECT_EQ(flash_key_groups(784, 16, 64, WeightType::F16, false, 132, kSm90), 1);  // bidirectional (vision): blocks alike
  EXPECT_EQ(flash_key_groups(4096, 16, 128, kBf16, true, 132, kSm90), 1);
}

}  // namespace
}  // namespace qvl::cuda
