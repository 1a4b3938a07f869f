#include "backend/cpu/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu_features.h"
#include "core/thread_pool.h"

namespace qvl::cpu {
namespace {

// The sum of kReadStreams runs of `run` floats each (p, p + run, ...), read side by side.
__attribute__((target("avx2"))) double sum_avx2(const float* p, std::size_t run) {
  __m256 acc[kReadStreams];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (std::size_t i = 0; i + 8 <= run; i += 8)
    for (std::size_t r = 0; r < kReadStreams; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_loadu_ps(p + r * run + i));
  float out[8];
  for (std::size_t r = 1; r < kReadStreams; ++r) acc[0] = _mm256_add_ps(acc[0], acc[r]);
  _mm256_storeu_ps(out, acc[0]);
  double s = 0;
  for (float v : out) s += v;
  return s;
}
double sum_plain(const float* p, std::size_t run) {
  double s[kReadStreams] = {};
  for (std::size_t i = 0; i < run; ++i)
    for (std::size_t r = 0; r < kReadStreams; ++r) s[r] += p[r * run + i];
  return std::accumulate(s, s + kReadStreams, 0.0);
}

}  // namespace

double measure_read_bandwidth(double buffer_gib, int repeats) {
  const std::size_t n = std::size_t(buffer_gib * double(1ull << 30)) / sizeof(float) / 64 * 64;
  float* data = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  auto& pool = ThreadPool::global();
  pool.parallel_for(n, 1 << 16, [&](std::size_t b, std::size_t e) { std::memset(data + b, 0, (e - b) * sizeof(float)); });
  const bool avx2 = cpu_features().avx2;
  std::vector<double> sink(std::size_t(pool.size()));
  double best = 0;
  for (int r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(n, 1 << 16, [&](std::size_t b, std::size_t e) {
      // Windows of kReadStreams runs of kRunBytes, as a decode's products read their rows where that is faster
      // (cpu_products.h): what the memory can give, not what a single run draws.
      constexpr std::size_t run = kRunBytes / sizeof(float), window = kReadStreams * run;
      double s = 0;
      std::size_t i = b;
      for (; i + window <= e; i += window) s += avx2 ? sum_avx2(data + i, run) : sum_plain(data + i, run);
      sink[b * sink.size() / n] += s + std::accumulate(data + i, data + e, 0.0);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, double(n * sizeof(float)) / s);
  }
  std::free(data);
  return best;
}

}  // namespace qvl::cpu
