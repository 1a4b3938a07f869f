// Every SIMD variant of the CPU attention kernels this processor runs agrees with the plain C++ one: score tiles
// (row counts that exercise the two-row blocks), one query's scores against stored keys (key counts off the
// passes of four, head sizes off the vector width), the vectorised exp against std::exp over the softmax range, and
// weighted value rows for head sizes with and without a vector tail.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/attention_kernels.h"

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
      for (std::size_t n : {1u, 3u, 4u, 7u, 300u}) {  // one query against keys as stored: passes of four and the rest
        std::vector<float> q(d), keys(n * (d + 5)), want(n), got(n);
        for (auto& e : q) e = normal(rng);
        for (auto& e : keys) e = normal(rng);
        attention_kernels_generic().score_rows(q.data(), keys.data(), n, d + 5, d, want.data());
        v->score_rows(q.data(), keys.data(), n, d + 5, d, got.data());
        for (std::size_t t = 0; t < n; ++t) EXPECT_NEAR(got[t], want[t], 1e-5f * std::sqrt(float(d)) * 4) << v->name << " d=" << d << " n=" << n;
      }
      for (std::size_t n : {1u, 15u, 16u, 17u, 300u}) {
        std::vector<float> p(n), rows_v(n * (d + 3)), want(d), got(d);
        for (auto& e : p) e = std::abs(normal(rng));
        for (auto& e : rows_v) e = normal(rng);
        attention_kernels_generic().weighted_rows(p.data(), n, rows_v.data(), d + 3, d, want.data());
        v->weighted_rows(p.data(), n, rows_v.data(), d + 3, d, got.data());
        for (std::size_t e = 0; e < d; ++e) EXPECT_NEAR(got[e], want[e], 1e-5f * float(n)) << v->name << " n=" << n;
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

}  // namespace
}  // namespace qvl::cpu
