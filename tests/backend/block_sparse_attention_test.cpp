// Block-sparse causal attention on the CPU (the reference the GPU kernels are compared with): the layout helper's
// blocks, the result against a direct double-precision evaluation of the same mask, the dense layout against plain
// causal attention, and layouts that cannot work rejected with a message. Also the vision tower's mask (image
// segments) against the same direct evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "core/error.h"
#include "test_support.h"

namespace qvl {
namespace {

TEST(BlockSparseAttention, LocalGlobalLayoutKeepsTheWindowTheFirstBlocksAndCausality) {
  const auto layout = AttentionMask::local_global_layout(6, 2, 1);
  const auto seen = [&](int64_t qb, int64_t kb) { return layout[std::size_t(qb * 6 + kb)] != 0; };
  for (int64_t qb = 0; qb < 6; ++qb)
    for (int64_t kb = 0; kb < 6; ++kb) EXPECT_EQ(seen(qb, kb), kb <= qb && (kb == 0 || qb - kb < 2)) << qb << "," << kb;
}

// out[i] = Σ_t softmax(q_i·k_t·scale) v_t over the keys [first, end) that sees(i, t) keeps for query i.
template <typename Sees>
std::vector<double> direct(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Sees sees) {
  const int64_t s = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1), keys = k.dim(0);
  std::vector<double> out(std::size_t(q.numel()));
  for (int64_t i = 0; i < s; ++i)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kvh = h / (hq / hkv);
      std::vector<double> w(std::size_t(keys), -INFINITY);  // hidden keys keep -inf: exp gives them 0
      double best = -INFINITY, total = 0;
      for (int64_t t = 0; t < keys; ++t) {
        if (!sees(i, t)) continue;
        double dot = 0;
        for (int64_t e = 0; e < d; ++e)
          dot += double(q.data<float>()[(i * hq + h) * d + e]) * k.data<float>()[(t * hkv + kvh) * d + e];
        w[std::size_t(t)] = dot * scale;
        best = std::max(best, w[std::size_t(t)]);
      }
      for (int64_t t = 0; t < keys; ++t) total += w[std::size_t(t)] = std::exp(w[std::size_t(t)] - best);
      for (int64_t e = 0; e < d; ++e) {
        double acc = 0;
        for (int64_t t = 0; t < keys; ++t) acc += w[std::size_t(t)] * v.data<float>()[(t * hkv + kvh) * d + e];
        out[std::size_t((i * hq + h) * d + e)] = acc / total;
      }
    }
  return out;
}

// The block-sparse causal mask: t <= past + i and the layout's block.
std::vector<double> direct(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, float scale) {
  const int64_t block = AttentionMask::kSparseBlock;
  return direct(q, k, v, scale, [&](int64_t i, int64_t t) {
    const int64_t p = mask.past + i;
    return t <= p && mask.block_layout[std::size_t(p / block * mask.layout_side + t / block)] != 0;
  });
}

double worst_difference(const Tensor& out, const std::vector<double>& expected) {
  double worst = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, std::abs(out.data<float>()[i] - expected[i]));
  return worst;
}

TEST(BlockSparseAttention, CpuMatchesADirectEvaluationOfTheSameMask) {
  const auto be = make_cpu_backend();
  // 300 queries after 37 cached positions: query blocks do not start on a query-block boundary of the kernel.
  const int64_t s = 300, past = 37, hq = 4, hkv = 2, d = 32, side = (past + s + 63) / 64;
  const Tensor q = test::random_normal({s, hq, d}, 1), k = test::random_normal({past + s, hkv, d}, 2),
               v = test::random_normal({past + s, hkv, d}, 3);
  const AttentionMask mask =
      AttentionMask::causal_block_sparse(past, AttentionMask::local_global_layout(side, 2, 1), side);
  Tensor out = be->alloc({s, hq, d});
  be->attention(q, k, v, past + s, mask, 0.2f, out);
  EXPECT_LT(worst_difference(out, direct(q, k, v, mask, 0.2f)), 1e-5);
  // The layout changes the answer where it hides keys (the last block's queries lose blocks 1..3).
  Tensor dense = be->alloc({s, hq, d});
  be->attention(q, k, v, past + s, AttentionMask::causal(past), 0.2f, dense);
  EXPECT_NE(out.to_f32_vector(), dense.to_f32_vector());
}

// Three pictures' patches (70, 150 and 30: blocks of 64 queries that straddle two pictures, and a picture inside one
// block) attend within their own picture only, two query heads a kv head, at the vision tower's head size.
TEST(BlockSparseAttention, ImageSegmentsMatchADirectEvaluation) {
  const auto be = make_cpu_backend();
  const std::vector<int64_t> bounds{0, 70, 220, 250};
  const int64_t s = bounds.back(), hq = 4, hkv = 2, d = 64;
  const Tensor q = test::random_normal({s, hq, d}, 4), k = test::random_normal({s, hkv, d}, 5),
               v = test::random_normal({s, hkv, d}, 6);
  Tensor out = be->alloc({s, hq, d});
  be->attention(q, k, v, s, AttentionMask::segments(bounds), 0.125f, out);
  const auto picture = [&](int64_t i) { return std::upper_bound(bounds.begin(), bounds.end(), i) - bounds.begin(); };
  EXPECT_LT(worst_difference(out, direct(q, k, v, 0.125f, [&](int64_t i, int64_t t) { return picture(i) == picture(t); })),
            1e-5);
  Tensor whole = be->alloc({s, hq, d});  // one picture of all 250: a different answer
  be->attention(q, k, v, s, AttentionMask::segments({0, s}), 0.125f, whole);
  EXPECT_NE(out.to_f32_vector(), whole.to_f32_vector());
}

TEST(BlockSparseAttention, AFullLayoutIsPlainCausalAttention) {
  const auto be = make_cpu_backend();
  const int64_t s = 130, hq = 2, hkv = 1, d = 16, side = 3;
  const Tensor q = test::random_normal({s, hq, d}, 4), k = test::random_normal({s, hkv, d}, 5),
               v = test::random_normal({s, hkv, d}, 6);
  Tensor sparse = be->alloc({s, hq, d}), dense = be->alloc({s, hq, d});
  const std::vector<int64_t> full = AttentionMask::local_global_layout(side, side, 0);
  be->attention(q, k, v, s, AttentionMask::causal_block_sparse(0, full, side), 0.25f, sparse);
  be->attention(q, k, v, s, AttentionMask::causal(0), 0.25f, dense);
  EXPECT_EQ(sparse.to_f32_vector(), dense.to_f32_vector());
}

TEST(BlockSparseAttention, LayoutsThatCannotWorkAreRejected) {
  const auto be = make_cpu_backend();
  const Tensor q = test::random_normal({100, 2, 16}, 7), k = test::random_normal({100, 2, 16}, 8);
  Tensor out = be->alloc({100, 2, 16});
  const auto message = [&](const AttentionMask& mask) {
    try {
      be->attention(q, k, k, 100, mask, 0.25f, out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(AttentionMask::causal_block_sparse(0, AttentionMask::local_global_layout(1, 1, 0), 1))
                .find("covers 64 positions, the queries reach 100"),
            std::string::npos);
  EXPECT_NE(message(AttentionMask::causal_block_sparse(0, {1, 0, 1}, 2)).find("3 entries, not 2 x 2"),
            std::string::npos);
  EXPECT_NE(message(AttentionMask::causal_block_sparse(0, {1, 0, 1, 0}, 2))
                .find("block 1 of the layout does not see itself"),
            std::string::npos);
}

}  // namespace
}  // namespace qvl
