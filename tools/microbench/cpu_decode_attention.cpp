// Microbenchmark, not part of the product (docs/performance.md, "The CPU's decode attention at long contexts"): the
// CPU's one-query attention (backend/cpu/decode_attention.h) at the 2B's shapes, 16 query heads over 8 kv heads of
// 128, for a few key counts. Each call reads another of kCaches f32 caches of 4,096 positions (33.5 MB of keys and
// values each, 1.1 GB in all, past the 480 MB of L3 this project's machine reports), so the keys and values come from
// memory as in a decode step, not from the cache the last call left them in; medians of 300 calls after 32 that are
// not counted. Then the same caches in bf16 (half the bytes, widened as loaded; docs/performance.md, "The CPU's KV
// cache in bf16").
// Build against a release tree and run (the thread pool reads QVL_THREADS; QVL_CPU_KERNELS=avx2 for the AVX2 loops):
//   g++ -std=c++20 -O2 -Iengine tools/microbench/cpu_decode_attention.cpp -Lbuild/release/lib -lqvl-engine \
//       -Wl,-rpath,$PWD/build/release/lib -o /tmp/cpu_decode_attention && QVL_THREADS=2 /tmp/cpu_decode_attention
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/decode_attention.h"
#include "core/half.h"

int main() {
  constexpr int heads = 16, kv_heads = 8, d = 128, capacity = 4096, kCaches = 32, kWarmUp = 32, kCalls = 300;
  const std::size_t cache_elements = std::size_t(capacity) * kv_heads * d;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> q(heads * d), out(heads * d), k(kCaches * cache_elements), v(k.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = normal(rng);
  std::vector<uint16_t> k16(k.size()), v16(v.size());  // the same caches in bf16
  for (std::size_t i = 0; i < k.size(); ++i) k16[i] = qvl::f32_to_bf16(k[i]), v16[i] = qvl::f32_to_bf16(v[i]);
  std::printf("attention kernels: %s\n", qvl::cpu::attention_kernels().name);
  for (const qvl::DType type : {qvl::DType::F32, qvl::DType::BF16})
    for (const int keys : {256, 1024, 4096}) {
      const bool bf16 = type == qvl::DType::BF16;
      std::vector<double> us;
      for (int r = 0; r < kWarmUp + kCalls; ++r) {
        const std::size_t cache = std::size_t(r % kCaches) * cache_elements;
        const void* kp = bf16 ? static_cast<const void*>(k16.data() + cache) : k.data() + cache;
        const void* vp = bf16 ? static_cast<const void*>(v16.data() + cache) : v.data() + cache;
        const auto t0 = std::chrono::steady_clock::now();
        qvl::cpu::decode_attention({.q = q.data(), .k = kp, .v = vp, .type = type, .heads = heads, .kv_heads = kv_heads,
                                    .d = d, .first_key = 0, .end_key = keys, .scale = 0.088f, .out = out.data()});
        if (r >= kWarmUp) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(us.begin(), us.end());
      const double bytes = 2.0 * keys * kv_heads * d * qvl::dtype_size(type);
      std::printf("%s keys %5d  median %9.2f us  (%.1f GB/s of keys and values)\n", bf16 ? "bf16" : "f32 ", keys,
                  us[us.size() / 2], bytes / us[us.size() / 2] / 1e3);
    }
}
