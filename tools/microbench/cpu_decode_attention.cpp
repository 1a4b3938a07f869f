// Microbenchmark, not part of the product (docs/performance.md, "The CPU's decode attention at long contexts"): the
// CPU's one-query attention (backend/cpu/decode_attention.h) at the 2B's shapes, 16 query heads over 8 kv heads of
// 128, an f32 cache of 4,200 positions, for a few key counts; medians of 2,000 calls (the first ones warm up).
// Build against a release tree and run (the thread pool reads QVL_THREADS):
//   g++ -std=c++20 -O2 -Iengine tools/microbench/cpu_decode_attention.cpp -Lbuild/release/lib -lqvl-engine \
//       -Wl,-rpath,$PWD/build/release/lib -o /tmp/cpu_decode_attention && QVL_THREADS=2 /tmp/cpu_decode_attention
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/decode_attention.h"

int main() {
  constexpr int heads = 16, kv_heads = 8, d = 128, capacity = 4200;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> q(heads * d), k(std::size_t(capacity) * kv_heads * d), v(k.size()), out(heads * d);
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = normal(rng);
  for (const int keys : {32, 256, 1024, 4096}) {
    std::vector<double> us;
    for (int r = 0; r < 2000; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      qvl::cpu::decode_attention({.q = q.data(), .k = k.data(), .v = v.data(), .heads = heads, .kv_heads = kv_heads,
                                  .d = d, .first_key = 0, .end_key = keys, .scale = 0.088f, .out = out.data()});
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    const double bytes = 2.0 * keys * kv_heads * d * sizeof(float);
    std::printf("keys %5d  median %9.2f us  (%.1f GB/s of keys and values)\n", keys, us[us.size() / 2],
                bytes / us[us.size() / 2] / 1e3);
  }
}
