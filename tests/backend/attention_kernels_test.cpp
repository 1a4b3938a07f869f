// Every SIMD variant of the CPU attention kernels this processor runs agrees with the plain C++ one: score tiles
// (row counts that exercise the two-row blocks), one to three queries' scores against stored keys (key counts off the
// passes of four, head sizes off the vector width), the softmax's shift (the largest scaled score, NaNs skipped), the
// vectorised exp against std::exp over the softmax range, and weighted value rows for one to three queries and head
// sizes with and without a vector tail (a pair giving each query's own bits); and the packed GEMM's product of
// queries with packed keys, which the CPU's prefill attention runs for its scores, against the score tiles of the
// same instruction set, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"
#include "core/half.h"

namespace qvl::cpu {
namespace {

TEST(AttentionKernels, EveryVariantMatchesTheGenericKernel) {
  int tested = 0;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (const AttentionKernels* v : {attention_kernels_avx2(), attention_kernels_avx512()}) {
    if (!v) continue;
    ++tested;
    // weighted_rows' passes (AVX2 64 dimensions, AVX-512 128) and tails: 4 (AVX2's scalar tail alone), 100 (a short
    // last pass, then a tail), 132 (whole passes, then a tail), 264 (several passes)
    for (std::size_t d : {4u, 8u, 20u, 32u, 36u, 64u, 72u, 100u, 128u, 132u, 264u}) {
      for (std::size_t rows : {1u, 2u, 5u, 64u}) {
        std::vector<float> q(rows * d), kt(d * kKeyTile), want(rows * 20), got(rows * 20);
        for (auto& e : q) e = normal(rng);
        for (auto& e : kt) e = normal(rng);
        attention_kernels_generic().score_tile(q.data(), rows, d, kt.data(), want.data(), 20);
        v->score_tile(q.data(), rows, d, kt.data(), got.data(), 20);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t j = 0; j < kKeyTile; ++j)
            EXPECT_NEAR(got[r * 20 + j], want[r * 20 + j], 1e-5f * std::sqrt(float(d)) * 4) << v->name << " d=" << d;
      }
      // Queries against keys as stored: passes of four and the rest, one query, a pair (the 2B's query heads a kv
      // head) and a pair plus one.
      for (std::size_t queries : {1u, 2u, 3u})
        for (std::size_t n : {1u, 3u, 4u, 7u, 300u}) {
          std::vector<float> q(queries * d), keys(n * (d + 5)), want(queries * (n + 2)), got(want.size());
          for (auto& e : q) e = normal(rng);
          for (auto& e : keys) e = normal(rng);
          attention_kernels_generic().f32.score_rows(q.data(), queries, keys.data(), n, d + 5, d, want.data(), n + 2);
          v->f32.score_rows(q.data(), queries, keys.data(), n, d + 5, d, got.data(), n + 2);
          for (std::size_t g = 0; g < queries; ++g)
            for (std::size_t t = 0; t < n; ++t)
              EXPECT_NEAR(got[g * (n + 2) + t], want[g * (n + 2) + t], 1e-5f * std::sqrt(float(d)) * 4)
                  << v->name << " d=" << d << " n=" << n << " query " << g << " of " << queries;
        }
      for (std::size_t queries : {1u, 2u, 3u})
        for (std::size_t n : {1u, 15u, 16u, 17u, 300u}) {
          std::vector<float> p(queries * (n + 1)), rows_v(n * (d + 3)), want(queries * d), got(queries * d);
          for (auto& e : p) e = std::abs(normal(rng));
          for (auto& e : rows_v) e = normal(rng);
          attention_kernels_generic().f32.weighted_rows(p.data(), queries, n + 1, rows_v.data(), n, d + 3, d, want.data());
          v->f32.weighted_rows(p.data(), queries, n + 1, rows_v.data(), n, d + 3, d, got.data());
          for (std::size_t e = 0; e < queries * d; ++e)
            EXPECT_NEAR(got[e], want[e], 1e-5f * float(n)) << v->name << " n=" << n << " queries " << queries;
          // A pair's outputs are the bits each query alone gives (the kernels load a row once for both).
          if (queries == 2) {
            std::vector<float> alone(d);
            for (std::size_t g = 0; g < 2; ++g) {
              v->f32.weighted_rows(p.data() + g * (n + 1), 1, 0, rows_v.data(), n, d + 3, d, alone.data());
              EXPECT_EQ(0, std::memcmp(alone.data(), got.data() + g * d, d * sizeof(float))) << v->name << " n=" << n;
            }
          }
        }
    }
    // The softmax's shift: the largest scaled score, as the scalar loop finds it (a maximum is exact), over lengths
    // off the vector width with a hidden key's -inf among them. Then the largest at every position up to 40, with
    // NaN scores 8 and 16 after it (its lane in either width, in the body or the masked tail) and at the first: a
    // variant that let a NaN into a lane would lose that lane's maximum.
    for (std::size_t n : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 33u, 40u, 1000u}) {
      std::vector<float> x(n);
      for (auto& e : x) e = 4.0f * normal(rng);
      if (n > 3) x[2] = -INFINITY;
      const float want = attention_kernels_generic().max_scaled(x.data(), n, 0.125f);
      EXPECT_EQ(v->max_scaled(x.data(), n, 0.125f), want) << v->name << " n=" << n;
      if (n == 0) {
        EXPECT_EQ(want, -INFINITY);
      }
      for (std::size_t at = 0; at < std::min<std::size_t>(n, 40); ++at) {
        std::vector<float> y = x;
        y[at] = 100.0f;
        for (std::size_t nan : {at + 8, at + 16, std::size_t(0)})
          if (nan < n && nan != at) y[nan] = NAN;
        EXPECT_EQ(attention_kernels_generic().max_scaled(y.data(), n, 0.125f), 12.5f) << "n=" << n << " at " << at;
        EXPECT_EQ(v->max_scaled(y.data(), n, 0.125f), 12.5f) << v->name << " n=" << n << " largest at " << at;
      }
    }
    // exp over what a softmax feeds it: scaled scores minus their maximum, down to where float underflows.
    for (std::size_t n : {1u, 7u, 16u, 33u, 1000u}) {
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = -100.0f * float(i) / float(n) + 0.01f * normal(rng);
      std::vector<float> want = x, got = x;
      const float sum_want = attention_kernels_generic().exp_scaled(want.data(), n, 0.5f, 0.25f);
      const float sum_got = v->exp_scaled(got.data(), n, 0.5f, 0.25f);
      for (std::size_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], want[i], 3e-7f * want[i] + 1e-37f) << v->name << " x=" << x[i];
      EXPECT_NEAR(sum_got, sum_want, 1e-6f * sum_want) << v->name;
    }
  }
  if (tested == 0) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512; only the generic kernel runs";
  std::printf("compared %d SIMD variant(s) with the generic kernels; in use: %s\n", tested, attention_kernels().name);
}

// The prefill attention's scores come from the packed GEMM where it runs (cpu_backend.cpp): they must be the bits the
// score tiles of the same instruction set gave, at head sizes with and without a vector tail and key counts off the
// tiles of 16 and the panels.
TEST(AttentionKernels, ThePackedProductGivesTheScoreTilesBits) {
  int tested = 0;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (auto [tiles, gemm] : {std::pair{attention_kernels_avx2(), gemm_kernels_avx2()},
                             std::pair{attention_kernels_avx512(), gemm_kernels_avx512()}}) {
    if (!tiles || !gemm) continue;
    ++tested;
    for (std::size_t d : {64u, 72u, 128u})
      for (std::size_t rows : {1u, 5u, 64u})
        for (std::size_t n : {7u, 40u, 100u}) {
          std::vector<float> q(rows * d), keys(n * d);
          for (auto& e : q) e = normal(rng);
          for (auto& e : keys) e = normal(rng);
          const std::size_t stride = (n + kKeyTile - 1) / kKeyTile * kKeyTile;
          std::vector<float> want(rows * stride), got(rows * stride), kt(d * kKeyTile);
          for (std::size_t t0 = 0; t0 < n; t0 += kKeyTile) {
            for (std::size_t j = 0; j < kKeyTile; ++j)
              for (std::size_t e = 0; e < d; ++e) kt[e * kKeyTile + j] = t0 + j < n ? keys[(t0 + j) * d + e] : 0.0f;
            tiles->score_tile(q.data(), rows, d, kt.data(), want.data() + t0, stride);
          }
          PackedRows packed;
          packed.extend(*gemm, keys.data(), d * 4, DType::F32, d, n);
          gemm_packed_rows(*gemm, PackedActivations(q.data(), rows, d, gemm->mr), packed, n, got.data(), stride);
          for (std::size_t r = 0; r < rows; ++r)
            ASSERT_EQ(0, std::memcmp(got.data() + r * stride, want.data() + r * stride, n * sizeof(float)))
                << gemm->name << " d=" << d << " rows=" << rows << " keys=" << n << " row " << r;
        }
  }
  if (tested == 0) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512 (the tiles serve alone)";
}

// A bf16 cache's rows widened as they are loaded: each variant's bf16 kernels give the bits its f32 kernels give over
// the same values in f32, for head sizes with and without a vector tail (where AVX-512 copies the last elements
// instead of a masked load) and row counts off the passes of four.
TEST(AttentionKernels, Bf16RowsGiveTheF32KernelsBitsOverTheSameValues) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<const AttentionKernels*> variants{&attention_kernels_generic()};
  for (const AttentionKernels* v : {attention_kernels_avx2(), attention_kernels_avx512()})
    if (v) variants.push_back(v);
  for (const AttentionKernels* v : variants)
    for (std::size_t d : {4u, 20u, 72u, 100u, 128u, 132u})
      for (std::size_t n : {1u, 3u, 17u, 64u}) {
        const std::size_t stride = d + 6;
        constexpr std::size_t kQueries = 2;  // a pair: the loads shared
        // Rows `stride` apart, the last one ending the buffer: a read past it is out of bounds (ASan builds).
        std::vector<float> q(kQueries * d), p(kQueries * n), wide((n - 1) * stride + d);
        std::vector<uint16_t> stored(wide.size());
        for (auto& e : q) e = normal(rng);
        for (auto& e : p) e = std::abs(normal(rng));
        for (std::size_t i = 0; i < stored.size(); ++i) wide[i] = bf16_to_f32(stored[i] = f32_to_bf16(normal(rng)));
        std::vector<float> want(kQueries * std::max(n, d)), got(want.size());
        v->f32.score_rows(q.data(), kQueries, wide.data(), n, stride, d, want.data(), n);
        v->bf16.score_rows(q.data(), kQueries, stored.data(), n, stride, d, got.data(), n);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), kQueries * n * sizeof(float))) << v->name << " scores d=" << d << " n=" << n;
        v->f32.weighted_rows(p.data(), kQueries, n, wide.data(), n, stride, d, want.data());
        v->bf16.weighted_rows(p.data(), kQueries, n, stored.data(), n, stride, d, got.data());
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), kQueries * d * sizeof(float))) << v->name << " values d=" << d << " n=" << n;
      }
  EXPECT_THROW(attention_kernels().rows(DType::F16), Error);
}

}  // namespace
}  // namespace qvl::cpu
