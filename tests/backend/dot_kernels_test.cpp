// Every SIMD variant of the CPU dot kernels this processor can run agrees with the plain C++ one, for each weight
// type and for row counts and lengths that exercise the 4-row blocks and the vector tails.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/dot_kernels.h"
#include "core/half.h"

namespace qvl::cpu {
namespace {

TEST(DotKernels, EveryVariantMatchesTheGenericKernel) {
  std::vector<const DotKernels*> variants{dot_kernels_avx2(), dot_kernels_avx512()};
  int tested = 0;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (const DotKernels* v : variants) {
    if (!v) continue;
    ++tested;
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      for (std::size_t k : {1u, 7u, 16u, 33u, 64u, 100u, 2048u}) {
        for (std::size_t rows : {1u, 3u, 4u, 9u}) {
          std::vector<float> x(rows * k), w32(k);
          for (auto& e : x) e = normal(rng);
          for (auto& e : w32) e = normal(rng);
          std::vector<uint16_t> w16(k);
          for (std::size_t i = 0; i < k; ++i) w16[i] = t == DType::BF16 ? f32_to_bf16(w32[i]) : f32_to_f16(w32[i]);
          const void* w = t == DType::F32 ? static_cast<const void*>(w32.data()) : w16.data();
          std::vector<float> want(rows), got(rows);
          dot_kernels_generic().dot_rows(x.data(), rows, k, w, t, want.data(), 1);
          v->dot_rows(x.data(), rows, k, w, t, got.data(), 1);
          for (std::size_t r = 0; r < rows; ++r)
            EXPECT_NEAR(got[r], want[r], 1e-4f * std::sqrt(float(k)) * 4) << v->name << " " << dtype_name(t) << " k=" << k;
        }
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512; only the generic kernel runs";
  std::printf("compared %d SIMD variant(s) with the generic kernel; in use: %s\n", tested, dot_kernels().name);
}

}  // namespace
}  // namespace qvl::cpu
