// The CPU's pick from the output head's bounds copy (backend/cpu/head_bounds.h) against the same backend's head
// product and pick over every logit: the same greedy pick and NaN flag, the same top-k candidates and draw, the
// picked row's logit bit for bit, every entry left at or above its logit; few rows computed where the logits are
// spread. And each instruction set's bounds pass bounds the logits of each instruction set's dot kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/head_bounds.h"
#include "backend/cpu/huge_pages.h"
#include "core/first_max.h"
#include "core/top_k.h"
#include "test_support.h"

namespace qvl {
namespace {

struct Shape {
  int64_t rows, width, vocabulary;
};

// The head's weights and input for one case (as the GPU op test's head_pick makes them): random, or with two rows
// along x's signs (an exact tie, or a bf16 step apart), an outlier in x, NaN in x, an infinite weight, tiny weights
// (a scale under FLT_MIN: always a candidate); a winner past the vocabulary, which must not count.
struct Case {
  Tensor x, w;
};
Case make_case(const Shape& sh, const std::string& variant, uint32_t seed) {
  const int64_t n = sh.rows, k = sh.width;
  Case c{test::random_normal({1, k}, seed), test::random_normal({n, k}, seed + 1)};
  float* x = c.x.data<float>();
  float* w = c.w.data<float>();
  for (int64_t i = 0; i < n * k; ++i) w[i] *= 0.02f;
  const auto winner_row = [&](int64_t r) {
    for (int64_t i = 0; i < k; ++i) w[r * k + i] = x[i] > 0 ? 0.05f : -0.05f;
  };
  const int64_t last = std::min(n, sh.vocabulary) - 3;
  if (variant == "exact tie" || variant == "one step apart") {
    winner_row(7), winner_row(last);
    if (variant == "one step apart") w[last * k + 1] *= 1.0078125f;
  }
  if (variant == "outlier in x") x[3] = 1000.0f;
  if (variant == "NaN in x") x[k / 2] = std::nanf("");
  if (variant == "infinite weight") w[5 * k] = std::numeric_limits<float>::infinity();
  if (variant == "tiny weights")
    for (int64_t i = 0; i < k; ++i) w[9 * k + i] = 1e-37f * (i % 3 == 0 ? 1.0f : -1.0f);
  if (variant == "200 tied winners")  // more than TopKSpec::kMaxCandidates at the top: top-k's candidates do not fit
    for (int64_t r = 10; r < std::min<int64_t>(210, std::min(n, sh.vocabulary)); ++r) winner_row(r);
  if (n > sh.vocabulary) winner_row(n - 1);
  return c;
}

// What the host samples from where top-k's candidates did not fit: core/top_k.h over the row the head's output holds
// (from the bounds copy: -inf outside the candidates), as (value, id) pairs.
std::vector<std::pair<float, int32_t>> host_top_k(const Tensor& logits, int64_t vocabulary) {
  std::vector<float> row(logits.data<float>(), logits.data<float>() + vocabulary), heap;
  std::vector<std::pair<float, int32_t>> kept;
  temperature_top_k(std::span(row), 0.7, 20, heap, [&](float v, int32_t id) { kept.emplace_back(v, id); });
  return kept;
}

std::vector<int64_t> top_k_slots(Backend& be, const Projection& p, int64_t vocabulary, bool from_bounds) {
  Tensor out = be.alloc_indices(TopKSpec::kSlots), state = be.alloc_indices(1), drawn = be.alloc_indices(1);
  const int64_t seed = 0x5eed;
  be.write_indices(state, {&seed, 1});
  TopKSpec spec{vocabulary, 20, 0.7};
  spec.top_p = 0.8, spec.draw_state = &state, spec.drawn = &drawn;
  if (from_bounds) {
    be.project_then_top_k(p, spec, out);
  } else {
    be.project(p);
    be.top_k_candidates(*p.outputs[0], spec, out);
  }
  std::vector<int64_t> slots(out.data<int64_t>(), out.data<int64_t>() + 2);
  if (!slots[1] && slots[0] > 0) slots.insert(slots.end(), out.data<int64_t>() + 2, out.data<int64_t>() + 2 + 2 * slots[0]);
  slots.push_back(drawn.data<int64_t>()[0]);
  slots.push_back(state.data<int64_t>()[0]);
  return slots;
}

TEST(HeadBounds, PickAndTopKAsFromEveryLogit) {
  // 200 rows: 13 blocks, fewer than top-k's 20 (every row a candidate); 300 x 1000: a width with no copy.
  const std::vector<Shape> shapes{{20000, 2048, 20000}, {3000, 512, 2900}, {1000, 2560, 1000}, {2000, 1552, 1999},
                                  {700, 48, 700},       {4096, 4096, 4096}, {200, 512, 200},   {300, 1000, 300}};
  const auto be = make_cpu_backend();
  int cases = 0;
  for (const DType wt : {DType::BF16, DType::F16, DType::F32})
    for (const Shape& sh : shapes) {
      if ((sh.rows == 4096 || sh.rows == 20000) && wt != DType::BF16) continue;  // the largest once
      for (const std::string variant : {"random", "exact tie", "one step apart", "outlier in x", "NaN in x",
                                        "infinite weight", "tiny weights", "200 tied winners"}) {
        if (variant == "200 tied winners" && sh.vocabulary < 1000) continue;
        const std::string what = std::string(dtype_name(wt)) + " " + std::to_string(sh.rows) + "x" +
                                 std::to_string(sh.width) + " v=" + std::to_string(sh.vocabulary) + " " + variant;
        SCOPED_TRACE(what);
        const Case c = make_case(sh, variant, uint32_t(11 + cases));
        const LinearWeights head = LinearWeights::of(c.w.to(wt));
        NormWeights norm{test::random_normal({sh.width}, 7), {}};
        for (int64_t i = 0; i < sh.width; ++i) norm.weight.data<float>()[i] = 1.0f + 0.1f * std::abs(norm.weight.data<float>()[i]);
        const RowNorm rms = RowNorm::rms(norm, 1e-6f);
        // A copy where the width takes one and the machine has room (a quarter of its memory left free after it);
        // else the head's product, as the copy-less rows below check.
        const bool fits = head_bounds_bytes(sh.rows, sh.width) > 0;
        const bool room = cpu::room_for_copy(head_bounds_bytes(sh.rows, sh.width));
        if (fits && !room) std::printf("[ note ] no room for a copy here: %s runs the head's product\n", what.c_str());
        const bool made = be->prepare_head_pick(head);
        ASSERT_EQ(made, fits && room && cpu::bound_rows());  // (none with the plain C++ kernels: QVL_CPU_KERNELS)
        ++cases;

        // Every logit and first_max over them; then the bounded pick.
        Tensor normed, full = be->alloc({1, sh.rows}), bounded = be->alloc({1, sh.rows}), pick = be->alloc_indices(2);
        be->project(Projection::of(c.x, head, full).reading_norm(rms, normed));
        const FirstMax want = first_max({full.data<float>(), std::size_t(sh.vocabulary)});
        be->project_then_pick(Projection::of(c.x, head, bounded).reading_norm(rms, normed), sh.vocabulary, pick);
        const auto picked = std::size_t(pick.data<int64_t>()[0]);
        EXPECT_EQ(picked, want.index);
        EXPECT_EQ(pick.data<int64_t>()[1] != 0, want.nan);
        int64_t below = 0, exact = 0;
        for (int64_t j = 0; j < sh.vocabulary; ++j) {
          const float f = full.data<float>()[j], b = bounded.data<float>()[j];
          below += !std::isnan(f) && !std::isnan(b) && b < f;
          exact += std::memcmp(&f, &b, sizeof f) == 0;
        }
        EXPECT_EQ(below, 0) << "an upper bound below its logit";
        const float fp = full.data<float>()[picked], bp = bounded.data<float>()[picked];
        EXPECT_EQ(std::memcmp(&fp, &bp, sizeof fp), 0) << "the picked row's logit is not the head's product";
        // Where the bounds are used, few rows are computed once the logits are spread (random rows; the 48-wide head's
        // spread is too small a multiple of its bound to leave few).
        if (made && variant == "random" && sh.width >= 512 && sh.vocabulary >= 1000) {
          EXPECT_LT(exact, sh.vocabulary / 20) << exact << " rows computed";
        }
        if (!made) {
          EXPECT_EQ(exact, sh.vocabulary) << "without a copy every logit is computed";
        }

        // Top-k at the models' defaults with the draw: the same candidates, draw and state.
        Tensor logits = be->alloc({1, sh.rows});
        const Projection p = Projection::of(c.x, head, logits).reading_norm(rms, normed);
        const std::vector<int64_t> bounded_slots = top_k_slots(*be, p, sh.vocabulary, true);
        const std::vector<std::pair<float, int32_t>> bounded_host = host_top_k(logits, sh.vocabulary);
        EXPECT_EQ(bounded_slots, top_k_slots(*be, p, sh.vocabulary, false));
        // Where they did not fit (the tied winners), the host's top-k over the row handed back keeps what it keeps
        // over every logit.
        if (variant == "200 tied winners") {
          EXPECT_EQ(bounded_slots[0], -1) << "the candidates fitted";
          EXPECT_EQ(bounded_host, host_top_k(logits, sh.vocabulary));
          EXPECT_EQ(bounded_host.size(), 200u);
        }
      }
    }
  // With the switch off the same call computes every logit.
  const Case c = make_case({64, 512, 64}, "random", 99);
  const LinearWeights head = LinearWeights::of(c.w.to(DType::BF16));
  if (!be->prepare_head_pick(head))
    GTEST_SKIP() << "skipped: no copy made (no room for 34 KB, or the plain C++ kernels: QVL_CPU_KERNELS=generic)";
  EXPECT_TRUE(be->picks_from_bounds_of(head));
  Fusions off;
  off.bounded_head_pick = false;
  be->set_fusions(off);
  EXPECT_FALSE(be->picks_from_bounds_of(head));
  Tensor full = be->alloc({1, 64}), through = be->alloc({1, 64}), pick = be->alloc_indices(2);
  be->project(Projection::of(c.x, head, full));
  be->project_then_pick(Projection::of(c.x, head, through), 64, pick);
  EXPECT_EQ(std::memcmp(full.raw(), through.raw(), full.nbytes()), 0);
  be->set_fusions({});
  // A quantised head, or one too wide, has no copy.
  EXPECT_FALSE(be->prepare_head_pick(LinearWeights::of(test::random_normal({64, 8192}, 5).to(DType::BF16))));
}

// Each instruction set's bounds pass against each dot kernel's logits, for each weight type: lower <= logit <= upper
// on every row.
TEST(HeadBounds, EveryBoundsPassBoundsEveryDotKernel) {
  const std::vector<cpu::BoundRowsFn> passes{cpu::bound_rows_generic(), cpu::bound_rows_avx2(), cpu::bound_rows_avx512()};
  const std::vector<const cpu::DotKernels*> dots{&cpu::dot_kernels_generic(), cpu::dot_kernels_avx2(),
                                                 cpu::dot_kernels_avx512()};
  int compared = 0;
  for (const auto& [wt, width] : std::vector<std::pair<DType, int64_t>>{
           {DType::BF16, 48}, {DType::BF16, 1552}, {DType::BF16, 4096}, {DType::F16, 1552}, {DType::F32, 1552}}) {
    const int64_t rows = 600;
    Tensor x = test::random_normal({width}, 21), w = test::random_normal({rows, width}, 22).to(wt);
    x.data<float>()[1] = 40.0f;  // one large input: products of very different sizes
    const std::optional<cpu::HeadBoundsCopy> copy = cpu::make_head_bounds(w);
    if (!copy) GTEST_SKIP() << "skipped: no copy made (no room, or the plain C++ kernels: QVL_CPU_KERNELS=generic)";
    std::vector<float> magnitudes(static_cast<std::size_t>(copy->groups()), 0.0f);
    for (int64_t i = 0; i < width; ++i) magnitudes[std::size_t(i / cpu::kHeadBoundsGroup)] += std::abs(x.data<float>()[i]);
    for (const cpu::BoundRowsFn pass : passes) {
      if (!pass) continue;
      std::vector<float> upper(static_cast<std::size_t>(rows));
      pass({.values = copy->values(), .scales = copy->scales(), .x = x.data<float>(), .magnitudes = magnitudes.data(),
            .width = width, .groups = copy->groups(), .begin = 0, .end = rows, .upper = upper.data()});
      for (const cpu::DotKernels* dot : dots) {
        if (!dot) continue;
        ++compared;
        for (int64_t r = 0; r < rows; ++r) {
          float logit = 0.0f;
          const std::size_t row_bytes = std::size_t(width) * dtype_size(wt);
          dot->dot_tile(x.data<float>(), 1, std::size_t(width), static_cast<const char*>(w.raw()) + std::size_t(r) * row_bytes,
                        row_bytes, 1, wt, &logit, 1);
          // The pass returns only the largest lower bound; a row's own lower bound is its upper less twice its bound,
          // so the upper bound alone is checked here, and the lower through the one-row pass below.
          ASSERT_GE(upper[std::size_t(r)], logit) << dot->name << " " << dtype_name(wt) << " row " << r << " width " << width;
          float one_upper = 0.0f;
          const float lower = pass({.values = copy->values() + r * width, .scales = copy->scales() + r * copy->groups(),
                                    .x = x.data<float>(), .magnitudes = magnitudes.data(), .width = width,
                                    .groups = copy->groups(), .begin = r, .end = r + 1, .upper = &one_upper});
          ASSERT_LE(lower, logit) << dot->name << " " << dtype_name(wt) << " row " << r << " width " << width;
          ASSERT_EQ(one_upper, upper[std::size_t(r)]);
        }
      }
    }
  }
  std::printf("bounds passes x dot kernels compared: %d (in use: %s)\n", compared, cpu::dot_kernels().name);
}

}  // namespace
}  // namespace qvl
