// The CPU backend's q8 tiles (backend/cpu/q8_tiles.h): products against the double-precision reference of the same
// integers, ranges that cut a tile, the embedding rows found in their tiles, and which matrices the backend tiles.
// The tiles' one kernel needs AVX-512 VNNI: on a processor without it each test says so and is skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_products.h"
#include "backend/cpu/huge_pages.h"
#include "backend/cpu/q8_tiles.h"
#include "backend/cpu/quant_dot_kernels.h"
#include "backend/quantize.h"
#include "quantized_reference.h"
#include "test_support.h"

namespace qvl {
namespace {

#define REQUIRE_VNNI()                                                                                   \
  if (!cpu::quant_dot_kernels_avx512_vnni())                                                           \
  GTEST_SKIP() << "this processor has no AVX-512 VNNI: the q8 tiles have no kernel here and are not made"

double largest(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

TEST(Q8Tiles, ProductsMatchTheReferenceForEveryGroupAndRowCount) {
  REQUIRE_VNNI();
  const auto be = make_cpu_backend();
  // Groups of one block, four (q8's 128) and 32; rows padded to whole blocks (k = 48); decode (m = 1), prefill passes
  // of four and their remainders, and more activation rows than one block of 64 holds (m = 70).
  for (const int64_t group : {32, 128, 1024})
    for (const int64_t k : {48, 352, 2048})
      for (const int64_t m : {1, 3, 4, 9, 70}) {
        const Tensor x = test::random_normal({m, k}, uint32_t(k + m));
        const LinearWeights rows = quantize_matrix(test::random_normal({48, k}, uint32_t(k * 5 + group)), WeightFormat::Q8, group, "w");
        const LinearWeights tiles = cpu::q8_tiles_of(rows);
        ASSERT_TRUE(tiles.tiled);
        EXPECT_EQ(tiles.nbytes(), rows.nbytes());
        const std::vector<double> want = test::quantized_reference(x, rows);
        Tensor y = be->alloc({m, 48});
        be->linear(x, tiles, y);
        const double limit = 2e-6 * largest(want) * std::sqrt(double(k));
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(y.data<float>()[i], want[i], limit) << "group " << group << " k " << k << " m " << m << " at " << i;
      }
}

TEST(Q8Tiles, ARangeThatCutsATileWritesItsRowsAndNoOthers) {
  REQUIRE_VNNI();
  constexpr int64_t k = 256, n = 64, m = 2;
  const Tensor x = test::random_normal({m, k}, 3);
  const LinearWeights rows = quantize_matrix(test::random_normal({n, k}, 4), WeightFormat::Q8, 128, "w");
  const LinearWeights tiles = cpu::q8_tiles_of(rows);
  const test::QuantizedActivations xq = test::quantized_activations(x);
  const std::vector<double> want = test::quantized_reference(x, rows);
  constexpr float kUntouched = -12345.0f;
  std::vector<float> y(std::size_t(m * n), kUntouched);
  constexpr std::size_t begin = 5, end = 37;  // inside the first tile, across the second, into the third
  cpu::q8_tile_rows({.x = xq.q.data(), .x_scales = xq.scales.data(), .x_sums = xq.sums.data(), .rows = std::size_t(m),
                     .blocks = std::size_t(xq.blocks), .w = &tiles,
                     .y = y.data(), .y_stride = std::size_t(n)},
                    begin, end);
  for (int64_t r = 0; r < m; ++r)
    for (std::size_t j = 0; j < std::size_t(n); ++j) {
      const float got = y[std::size_t(r * n) + j];
      if (j < begin || j >= end) EXPECT_EQ(got, kUntouched) << "row " << r << " column " << j;
      else EXPECT_NEAR(got, want[std::size_t(r * n) + j], 2e-6 * largest(want) * std::sqrt(double(k))) << r << " " << j;
    }
}

TEST(Q8Tiles, EmbeddingRowsAreTheRowsDequantised) {
  REQUIRE_VNNI();
  for (const int64_t group : {32, 128}) {
    const LinearWeights rows = quantize_matrix(test::random_normal({32, 100}, uint32_t(group)), WeightFormat::Q8, group, "t");
    const LinearWeights tiles = cpu::q8_tiles_of(rows);
    std::vector<float> want(100), got(100);
    for (int64_t r = 0; r < 32; ++r) {
      dequantize_row(rows, r, want.data());
      cpu::dequantize_tiled_row(tiles, r, got.data());
      EXPECT_EQ(got, want) << "group " << group << " row " << r;
    }
    EXPECT_ANY_THROW(dequantize_row(tiles, 0, got.data()));  // the generic lookup reads rows: it refuses tiles
  }
}

TEST(Q8Tiles, TheCpuBackendTilesQ8MatricesOfWhole16RowTiles) {
  REQUIRE_VNNI();
  const auto be = make_cpu_backend();
  const Tensor bias = test::random_normal({32}, 9);
  const LinearWeights q8 = quantize_matrix(test::random_normal({32, 64}, 7), WeightFormat::Q8, 32, "w");
  LinearWeights with_bias = q8;
  with_bias.bias = bias;
  const LinearWeights up = be->upload_linear(with_bias);
  // $QVL_CPU_KERNELS=avx2 keeps rows, and so does a machine without room for a copy (huge_pages.h).
  const bool expected = cpu::q8_tiles_chosen() && cpu::room_for_copy(q8.nbytes());
  EXPECT_EQ(up.tiled, expected);
  EXPECT_EQ(be->upload_linear(q8, WeightRole::EmbeddingTable).tiled, expected);
  EXPECT_FALSE(be->upload_linear(quantize_matrix(test::random_normal({24, 64}, 8), WeightFormat::Q8, 32, "w")).tiled);
  EXPECT_FALSE(be->upload_linear(quantize_matrix(test::random_normal({32, 64}, 8), WeightFormat::Q4, 32, "w")).tiled);
  // The bias comes along, and the product is the rows' own.
  const Tensor x = test::random_normal({1, 64}, 10);
  Tensor y_tiles = be->alloc({1, 32}), y_rows = be->alloc({1, 32});
  be->linear(x, up, y_tiles);
  be->linear(x, with_bias, y_rows);
  for (int64_t j = 0; j < 32; ++j) EXPECT_NEAR(y_tiles.data<float>()[j], y_rows.data<float>()[j], 1e-4f) << j;
  // An embedding lookup finds its rows in the tiles.
  const LinearWeights table = be->upload_linear(q8, WeightRole::EmbeddingTable);
  Tensor looked_up = be->alloc({2, 64});
  const std::vector<int32_t> ids{3, 30};
  be->embed(table, ids, looked_up);
  std::vector<float> want(64);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    dequantize_row(q8, ids[i], want.data());
    for (int64_t c = 0; c < 64; ++c) EXPECT_EQ(looked_up.data<float>()[int64_t(i) * 64 + c], want[std::size_t(c)]);
  }
}

// One product over several matrices (a layer's q, k and v) in chunks of whole tiles over the threads: decode's guided
// chunks (m = 1) and prefill's (m = 5), each matrix's bias added once a row, and a call that mixes tiles and rows
// (the chunks then in rows, cutting tiles). The same outputs as the rows' products, within the f32 sums' order.
TEST(Q8Tiles, AProductOverSeveralTiledMatricesGivesEveryRowItsDot) {
  REQUIRE_VNNI();
  constexpr int64_t k = 256;
  const std::vector<int64_t> heights{1024, 512, 512};
  std::vector<LinearWeights> rows, tiles;
  for (std::size_t i = 0; i < heights.size(); ++i) {
    rows.push_back(quantize_matrix(test::random_normal({heights[i], k}, uint32_t(30 + i)), WeightFormat::Q8, 128, "w"));
    rows.back().bias = test::random_normal({heights[i]}, uint32_t(40 + i));
    tiles.push_back(cpu::q8_tiles_of(rows.back()));
  }
  for (const int64_t m : {1, 5}) {
    const Tensor x = test::random_normal({m, k}, uint32_t(50 + m));
    const auto run = [&](const std::vector<const LinearWeights*>& w) {
      std::vector<std::vector<float>> y;
      std::vector<cpu::ProductOutput> outputs;
      for (const LinearWeights* each : w) y.emplace_back(std::size_t(m * each->rows()));
      for (std::size_t i = 0; i < w.size(); ++i) outputs.push_back({w[i], y[i].data()});
      cpu::products(x, outputs, nullptr);
      return y;
    };
    const auto want = run({&rows[0], &rows[1], &rows[2]});
    for (const auto& w : {std::vector<const LinearWeights*>{&tiles[0], &tiles[1], &tiles[2]},
                          std::vector<const LinearWeights*>{&tiles[0], &rows[1], &tiles[2]}}) {
      const auto got = run(w);
      for (std::size_t i = 0; i < want.size(); ++i) {
        double scale = 0;
        for (float v : want[i]) scale = std::max(scale, double(std::fabs(v)));
        for (std::size_t j = 0; j < want[i].size(); ++j)
          ASSERT_NEAR(got[i][j], want[i][j], 1e-5 * scale) << "m " << m << " matrix " << i << " at " << j;
      }
    }
  }
}

TEST(Q8Tiles, SwigluOverTilesMatchesSwigluOverRows) {
  REQUIRE_VNNI();
  constexpr int64_t k = 256, n = 96;
  for (const int64_t m : {1, 5}) {
    const Tensor x = test::random_normal({m, k}, uint32_t(20 + m));
    const LinearWeights gate = quantize_matrix(test::random_normal({n, k}, 21), WeightFormat::Q8, 128, "gate");
    const LinearWeights up = quantize_matrix(test::random_normal({n, k}, 22), WeightFormat::Q8, 128, "up");
    std::vector<float> y_rows(std::size_t(m * n)), y_tiles(std::size_t(m * n)), scratch(std::size_t(m * n));
    cpu::swiglu_product(x, gate, up, y_rows.data(), scratch.data(), nullptr);
    cpu::swiglu_product(x, cpu::q8_tiles_of(gate), cpu::q8_tiles_of(up), y_tiles.data(), scratch.data(), nullptr);
    double scale = 0;
    for (float v : y_rows) scale = std::max(scale, double(std::fabs(v)));
    for (std::size_t i = 0; i < y_rows.size(); ++i) EXPECT_NEAR(y_tiles[i], y_rows[i], 1e-5 * scale) << "m " << m << " at " << i;
  }
}

}  // namespace
}  // namespace qvl
