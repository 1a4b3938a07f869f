// The CPU backend's ops that take their inputs from index tensors (the inputs of a recorded decode step) give
// exactly what the same ops give with the values passed on the host; a bf16 KV cache what an f32 one holding its
// values gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"
#include "test_support.h"

namespace qvl {
namespace {

TEST(CpuBackend, IndexTensorInputsMatchHostValues) {
  const auto be = make_cpu_backend();
  const LinearWeights table = LinearWeights::of(test::random_normal({50, 32}, 1));
  Tensor ids = be->alloc_indices(2);
  const std::vector<int64_t> id_values{7, 49};
  be->write_indices(ids, id_values);
  Tensor a = be->alloc({2, 32}), b = be->alloc({2, 32});
  be->embed_at(table, ids, a);
  be->embed(table, std::vector<int32_t>{7, 49}, b);
  EXPECT_EQ(a.to_f32_vector(), b.to_f32_vector());

  Tensor cache_a = test::random_normal({10, 2, 16}, 2), cache_b = cache_a.to(DType::F32);
  const Tensor row = test::random_normal({1, 2, 16}, 3);
  Tensor past = be->alloc_indices(1);
  be->write_indices(past, std::vector<int64_t>{6});
  be->copy_rows_at(row, cache_a, past);
  be->copy_rows(row, cache_b, 6);
  EXPECT_EQ(cache_a.to_f32_vector(), cache_b.to_f32_vector());

  const Tensor q = test::random_normal({1, 4, 16}, 4);
  Tensor on_device = be->alloc({1, 4, 16}), on_host = be->alloc({1, 4, 16});
  be->attention(q, cache_a, cache_a, 10, AttentionMask::causal_on_device(past, 9), 0.25f, on_device);
  be->attention(q, cache_a, cache_a, 7, AttentionMask::causal(6), 0.25f, on_host);
  EXPECT_EQ(on_device.to_f32_vector(), on_host.to_f32_vector());

  be->write_indices(past, std::vector<int64_t>{10});  // beyond the bound given: a clear error, not a wild read
  EXPECT_THROW(be->attention(q, cache_a, cache_a, 10, AttentionMask::causal_on_device(past, 9), 0.25f, on_device), Error);
  EXPECT_THROW(be->write_indices(past, std::vector<int64_t>{1, 2}), Error);
}

// A bf16 KV cache (EngineOptions::kv_cache): appended f32 rows are narrowed to nearest even, and every reader of
// the cache (the tiled prefill loop, block-sparse too, the decode step's, the attention tap) gives the bits it gives
// over an f32 cache holding the same values, at a head size with a vector tail (72) and the 2B's (128).
TEST(CpuBackend, ABf16KvCacheAnswersAsAnF32CacheHoldingItsValues) {
  const auto be = make_cpu_backend();
  EXPECT_THROW(be->set_cache_type(DType::F16), Error);
  for (const int64_t d : {72, 128}) {
    SCOPED_TRACE(testing::Message() << "d " << d);
    constexpr int64_t kCapacity = 300, kKvHeads = 2, kHeads = 4, kKeys = 260;
    be->set_cache_type(DType::BF16);
    Tensor k16 = be->alloc_cache({kCapacity, kKvHeads, d}), v16 = be->alloc_cache({kCapacity, kKvHeads, d});
    ASSERT_EQ(k16.dtype(), DType::BF16);
    const Tensor k_rows = test::random_normal({kKeys, kKvHeads, d}, 11), v_rows = test::random_normal({kKeys, kKvHeads, d}, 12);
    be->copy_rows(k_rows.slice_rows(0, 100), k16, 0);  // appended in two pieces, as a prefill and its follow-up
    be->copy_rows(k_rows.slice_rows(100, kKeys), k16, 100);
    be->copy_rows(v_rows, v16, 0);
    for (int64_t i = 0; i < kKeys * kKvHeads * d; ++i)
      ASSERT_EQ(k16.data<uint16_t>()[i], f32_to_bf16(k_rows.data<float>()[i])) << "element " << i;
    const Tensor k32 = k16.to(DType::F32), v32 = v16.to(DType::F32);
    Tensor kept = be->alloc_cache({kCapacity, kKvHeads, d});  // a kept conversation's rows copied as they are
    be->copy_rows(k16.slice_rows(0, kKeys), kept, 0);
    EXPECT_EQ(0, std::memcmp(kept.raw(), k16.raw(), std::size_t(kKeys * kKvHeads * d) * 2));

    const auto same_bits = [&](int64_t queries, const AttentionMask& mask, const char* what) {
      const Tensor q = test::random_normal({queries, kHeads, d}, 13);
      Tensor narrow = be->alloc({queries, kHeads, d}), wide = be->alloc({queries, kHeads, d});
      be->attention(q, k16, v16, kKeys, mask, 0.1f, narrow);
      be->attention(q, k32, v32, kKeys, mask, 0.1f, wide);
      EXPECT_EQ(0, std::memcmp(narrow.raw(), wide.raw(), std::size_t(narrow.nbytes()))) << what;
    };
    same_bits(1, AttentionMask::causal(kKeys - 1), "a decode step");
    same_bits(70, AttentionMask::causal(kKeys - 70), "a prefill chunk after 190 kept positions");
    same_bits(kKeys, AttentionMask::causal(0), "a prefill");
    same_bits(kKeys, AttentionMask::causal_block_sparse(0, AttentionMask::local_global_layout(5, 2, 1), 5),
              "a block-sparse prefill");

    const Tensor q = test::random_normal({1, kHeads, d}, 14);
    Tensor heat16 = be->alloc({40}), heat32 = be->alloc({40});
    be->attention_tap({&q, &k16, kKeys, nullptr, 200, 40, -1, 0.1f, &heat16});
    be->attention_tap({&q, &k32, kKeys, nullptr, 200, 40, -1, 0.1f, &heat32});
    EXPECT_EQ(heat16.to_f32_vector(), heat32.to_f32_vector());
  }
}

// The fused residual add + RMSNorm (a projection's closing norm) is the unfused sequence in one pass: same float
// operations, same results, for the sum and the normed rows.
TEST(CpuBackend, FusedAddRmsNormEqualsAddThenRmsNorm) {
  const auto be = make_cpu_backend();
  for (int64_t width : {1, 7, 2048}) {
    const Tensor in = test::random_normal({3, 5}, 5);
    const LinearWeights w = LinearWeights::of(test::random_normal({width, 5}, 6));
    const NormWeights norm{test::random_normal({width}, 7), {}};
    Tensor fused_x = test::random_normal({3, width}, 8), unfused_x = fused_x.to(DType::F32);
    Tensor fused_y, unfused_y, scratch = be->alloc({3, width});
    be->set_fusions(Fusions{});
    be->project(Projection::add_to(fused_x, in, w, scratch).then(RowNorm::rms(norm, 1e-6f), fused_y));
    project_unfused(*be, Projection::add_to(unfused_x, in, w, scratch).then(RowNorm::rms(norm, 1e-6f), unfused_y));
    EXPECT_EQ(fused_x.to_f32_vector(), unfused_x.to_f32_vector()) << width;
    EXPECT_EQ(fused_y.to_f32_vector(), unfused_y.to_f32_vector()) << width;
  }
}

// The backend's greedy pick (the default: the host's first_max over the row read back) into a pick tensor: the first
// index of the largest within the vocabulary, the NaN flag, and bad arguments refused by name.
TEST(CpuBackend, GreedyPickIsTheFirstLargestWithinTheVocabulary) {
  const auto be = make_cpu_backend();
  Tensor logits = test::random_normal({1, 1000}, 5).to(DType::F32), pick = be->alloc_indices(2);
  float* l = logits.data<float>();
  l[700] = l[300] = 9.0f;  // equal maxima: the first
  l[990] = 20.0f;          // past the vocabulary: not a candidate
  be->greedy_pick(logits, 900, pick);
  EXPECT_EQ(pick.data<int64_t>()[0], 300);
  EXPECT_EQ(pick.data<int64_t>()[1], 0);
  be->greedy_pick(logits, 1000, pick);
  EXPECT_EQ(pick.data<int64_t>()[0], 990);
  l[899] = std::nanf("");
  be->greedy_pick(logits, 900, pick);
  EXPECT_EQ(pick.data<int64_t>()[1], 1);
  EXPECT_THROW(be->greedy_pick(logits, 1001, pick), Error);
  EXPECT_THROW(be->greedy_pick(logits, 0, pick), Error);
  Tensor short_pick = be->alloc_indices(1);
  EXPECT_THROW(be->greedy_pick(logits, 900, short_pick), Error);
}

}  // namespace
}  // namespace qvl
