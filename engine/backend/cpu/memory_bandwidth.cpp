#include "backend/cpu/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/cpu_features.h"
#include "core/thread_pool.h"

namespace qvl::cpu {
namespace {

__attribute__((target("avx2"))) double sum_avx2(const float* p, std::size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  double s = 0;
  for (float v : out) s += v;
  return s;
}
double sum_plain(const float* p, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += p[i];
  return s;
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
      sink[b * sink.size() / n] += avx2 ? sum_avx2(data + b, e - b) : sum_plain(data + b, e - b);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, double(n * sizeof(float)) / s);
  }
  std::free(data);
  return best;
}

}  // namespace qvl::cpu
