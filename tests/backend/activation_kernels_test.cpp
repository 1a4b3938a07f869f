// Every SIMD variant of the CPU activations agrees with the textbook formulas (the generic kernels) over the range
// activations take, including the tails where tanh and the sigmoid saturate, for lengths with and without a tail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/activation_kernels.h"

namespace qvl::cpu {
namespace {

TEST(ActivationKernels, EveryVariantMatchesTheGenericKernel) {
  int tested = 0;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const ActivationKernels* v : {activation_kernels_avx2(), activation_kernels_avx512()}) {
    if (!v) continue;
    ++tested;
    for (std::size_t n : {1u, 7u, 16u, 17u, 1000u}) {
      std::vector<float> x(n), u(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = i % 50 == 3 ? (i % 100 == 3 ? 95.0f : -95.0f) : normal(rng);
      for (auto& e : u) e = normal(rng);
      std::vector<float> want(n), got(n);
      activation_kernels_generic().gelu_tanh(x.data(), want.data(), n);
      v->gelu_tanh(x.data(), got.data(), n);
      for (std::size_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], want[i], 2e-6f * std::fabs(x[i]) + 1e-7f) << v->name << " gelu x=" << x[i];
      activation_kernels_generic().silu_mul(x.data(), u.data(), want.data(), n);
      v->silu_mul(x.data(), u.data(), got.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        EXPECT_NEAR(got[i], want[i], 2e-6f * std::fabs(x[i] * u[i]) + 1e-7f) << v->name << " silu x=" << x[i];
    }
  }
  if (tested == 0) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512; only the generic kernel runs";
  std::printf("compared %d SIMD variant(s) with the generic kernels; in use: %s\n", tested, activation_kernels().name);
}

// The CPU's fused SwiGLU applies silu_mul to each chunk of a row's columns, the unfused pass to the whole tensor in
// other chunks: a value's bits must not depend on where its call's range starts or ends (the AVX2 tails once went
// through libm's exp, the vectors through a polynomial).
TEST(ActivationKernels, AValueGetsTheSameBitsWhereverItsRangeIsCut) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  constexpr std::size_t n = 203;
  std::vector<float> x(n), u(n);
  for (auto& e : x) e = normal(rng);
  for (auto& e : u) e = normal(rng);
  for (const ActivationKernels* v : {&activation_kernels_generic(), activation_kernels_avx2(), activation_kernels_avx512()}) {
    if (!v) continue;
    std::vector<float> whole_silu(n), whole_gelu(n), cut_silu(n), cut_gelu(n);
    v->silu_mul(x.data(), u.data(), whole_silu.data(), n);
    v->gelu_tanh(x.data(), whole_gelu.data(), n);
    for (std::size_t begin = 0, piece = 1; begin < n; begin += piece, piece = piece % 13 + 2) {
      const std::size_t count = std::min(piece, n - begin);
      v->silu_mul(x.data() + begin, u.data() + begin, cut_silu.data() + begin, count);
      v->gelu_tanh(x.data() + begin, cut_gelu.data() + begin, count);
    }
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(std::memcmp(&cut_silu[i], &whole_silu[i], sizeof(float)), 0) << v->name << " silu at " << i;
      EXPECT_EQ(std::memcmp(&cut_gelu[i], &whole_gelu[i], sizeof(float)), 0) << v->name << " gelu at " << i;
    }
  }
}

}  // namespace
}  // namespace qvl::cpu
