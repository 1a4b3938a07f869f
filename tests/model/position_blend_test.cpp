// The vision tower's position embedding: position_blend picks four table rows and weights per patch, and
// Backend::add_blended_rows adds their blend to the patch rows (the goldens check the whole against transformers;
// these check the pieces against expectations of their own).
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"
#include "model/rope.h"
#include "test_support.h"

namespace qvl {
namespace {

VisionConfig vision_with_table_side(int64_t side) {
  VisionConfig c;
  c.hidden_size = 16, c.num_heads = 2, c.spatial_merge_size = 2, c.num_position_embeddings = side * side;
  return c;
}

TEST(PositionBlend, AnImageOnTheTablesOwnGridReadsEachRowWhole) {
  // Interpolating a 6 x 6 table onto a 6 x 6 grid lands on its points: one tap of weight 1, the others 0, and the
  // patches in merge-window order (2 x 2 windows, row by row).
  const RowBlend blend = position_blend(vision_with_table_side(6), {{1, 6, 6}});
  ASSERT_EQ(blend.count(), 36);
  const auto be = make_cpu_backend();
  const Tensor table = test::random_normal({36, 16}, 7);
  Tensor x = be->alloc({36, 16});
  std::fill_n(x.data<float>(), x.numel(), 0.0f);
  be->add_blended_rows(x, table, blend);
  int64_t patch = 0;
  for (int64_t wr = 0; wr < 3; ++wr)
    for (int64_t wc = 0; wc < 3; ++wc)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j, ++patch) {
          const int64_t row = (wr * 2 + i) * 6 + wc * 2 + j;
          for (int64_t d = 0; d < 16; ++d)
            ASSERT_EQ(x.data<float>()[patch * 16 + d], table.data<float>()[row * 16 + d]) << "patch " << patch;
        }
}

TEST(PositionBlend, WeightsOfEveryPatchSumToOneAndTapsStayInTheTable) {
  for (const ImageGrid grid : {ImageGrid{1, 4, 6}, ImageGrid{1, 28, 28}, ImageGrid{1, 60, 2}, ImageGrid{2, 8, 8}}) {
    const RowBlend blend = position_blend(vision_with_table_side(48), {grid});
    ASSERT_EQ(blend.count(), grid.t * grid.h * grid.w);
    for (int64_t p = 0; p < blend.count(); ++p) {
      float sum = 0;
      for (int j = 0; j < RowBlend::kTaps; ++j) {
        const auto i = std::size_t(p * RowBlend::kTaps + j);
        EXPECT_GE(blend.weights[i], 0.0f);
        EXPECT_GE(blend.rows[i], 0);
        EXPECT_LT(blend.rows[i], 48 * 48);
        sum += blend.weights[i];
      }
      EXPECT_NEAR(sum, 1.0f, 1e-6f) << "patch " << p << " of a " << grid.h << "x" << grid.w << " grid";
    }
  }
}

TEST(PositionBlend, BadTapsAreRefusedNamingTheLimit) {
  const auto be = make_cpu_backend();
  const Tensor table = test::random_normal({9, 16}, 3);
  Tensor x = be->alloc({2, 16});
  RowBlend blend{{0, 1, 2, 3, 4, 5, 6, 9}, std::vector<float>(8, 0.25f)};
  try {
    be->add_blended_rows(x, table, blend);
    FAIL() << "a tap past the table was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 9 is outside the table of 9"), std::string::npos) << e.what();
  }
  blend.rows.resize(4), blend.weights.resize(4);  // one row's taps for two rows
  EXPECT_THROW(be->add_blended_rows(x, table, blend), Error);
  EXPECT_THROW(be->add_blended_rows(x, test::random_normal({9, 8}, 3), RowBlend{{0, 0, 0, 0, 0, 0, 0, 0}, std::vector<float>(8, 0.25f)}), Error);
}

}  // namespace
}  // namespace qvl
