// Microbenchmark, not part of the product (docs/performance.md has its results): a prefill product's inner loops on
// one thread, the dot tiles (dot_kernels.h: 4 weight rows x 3-4 activation rows, blocks of 64 activation rows, as
// cpu_products.cpp ran every float product) against the packed GEMM (gemm_kernels.h: the activations packed once,
// the weights packed per panel), in each instruction-set variant the processor has, over 256 weight rows of the
// 2B's shapes. GFLOP/s count 2·m·n·k; the packed figure includes packing the activations.
// Build against a release tree and run:
//   g++ -std=c++20 -O2 -Iengine tools/microbench/cpu_gemm.cpp -Lbuild/release/lib -lqvl-engine \
//       -Wl,-rpath,$PWD/build/release/lib -pthread -o /tmp/cpu_gemm && QVL_THREADS=1 /tmp/cpu_gemm
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/gemm_kernels.h"

using Clock = std::chrono::steady_clock;
using namespace qvl::cpu;

template <typename Fn>
double best_seconds(Fn&& fn) {
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

int main() {
  constexpr std::size_t n = 256;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("%-8s %5s %5s %12s %12s\n", "isa", "m", "k", "dot GF/s", "packed GF/s");
  for (const DotKernels* dot : {dot_kernels_avx2(), dot_kernels_avx512()}) {
    if (!dot) continue;
    const GemmKernels* gemm = std::string_view(dot->name) == "avx2" ? gemm_kernels_avx2() : gemm_kernels_avx512();
    for (const std::size_t k : {std::size_t(2048), std::size_t(6144)})
      for (const std::size_t m : {std::size_t(8), std::size_t(16), std::size_t(32), std::size_t(64), std::size_t(256)}) {
        std::vector<float> x(m * k), y(m * n);
        std::vector<uint16_t> w(n * k);
        for (float& v : x) v = dist(rng);
        for (uint16_t& v : w) v = uint16_t(0x3f80 + (rng() & 0x7f));  // bf16 in [1, 2)
        const std::size_t stride = k * 2;
        const double dot_s = best_seconds([&] {
          for (std::size_t m0 = 0; m0 < m; m0 += 64)
            for (std::size_t j = 0; j < n; j += kDotTileRows)
              dot->dot_tile(x.data() + m0 * k, std::min<std::size_t>(64, m - m0), k, w.data() + j * k, stride,
                            kDotTileRows, qvl::DType::BF16, y.data() + m0 * n + j, n);
        });
        const double gemm_s = best_seconds([&] {
          const PackedActivations packed(x.data(), m, k, gemm->mr);
          gemm_rows(*gemm, packed, k, w.data(), stride, qvl::DType::BF16, 0, n, y.data(), n, nullptr);
        });
        const double flop = 2.0 * double(m) * double(n) * double(k);
        std::printf("%-8s %5zu %5zu %12.1f %12.1f\n", dot->name, m, k, flop / dot_s / 1e9, flop / gemm_s / 1e9);
      }
  }
}
