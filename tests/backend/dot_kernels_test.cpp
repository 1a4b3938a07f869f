// Every SIMD variant of the CPU dot kernels this processor can run agrees with the plain C++ one, for each weight
// type and for activation rows, weight rows and lengths that exercise the register tiles, their tails and the vector
// tails.
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
        for (std::size_t rows : {1u, 2u, 3u, 4u, 5u, 9u}) {
          for (std::size_t w_rows = 1; w_rows <= kDotTileRows; ++w_rows) {
            std::vector<float> x(rows * k), w32(w_rows * k);
            for (auto& e : x) e = normal(rng);
            for (auto& e : w32) e = normal(rng);
            std::vector<uint16_t> w16(w32.size());
            for (std::size_t i = 0; i < w32.size(); ++i) w16[i] = t == DType::BF16 ? f32_to_bf16(w32[i]) : f32_to_f16(w32[i]);
            const void* w = t == DType::F32 ? static_cast<const void*>(w32.data()) : w16.data();
            const std::size_t stride = k * (t == DType::F32 ? 4 : 2);
            // y has a column more than the tile: what lies past w_rows must stay as it was.
            std::vector<float> want(rows * (w_rows + 1), -7.0f), got(want);
            dot_kernels_generic().dot_tile(x.data(), rows, k, w, stride, w_rows, t, want.data(), w_rows + 1);
            v->dot_tile(x.data(), rows, k, w, stride, w_rows, t, got.data(), w_rows + 1);
            for (std::size_t r = 0; r < rows; ++r)
              for (std::size_t j = 0; j <= w_rows; ++j)
                EXPECT_NEAR(got[r * (w_rows + 1) + j], want[r * (w_rows + 1) + j], 1e-4f * std::sqrt(float(k)) * 4)
                    << v->name << " " << dtype_name(t) << " k=" << k << " rows=" << rows << " weight rows=" << w_rows
                    << " column " << j;
          }
        }
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512; only the generic kernel runs";
  std::printf("compared %d SIMD variant(s) with the generic kernel; in use: %s\n", tested, dot_kernels().name);
}

}  // namespace
}  // namespace qvl::cpu
