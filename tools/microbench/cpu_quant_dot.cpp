// Microbenchmark, not part of the product (docs/quantization.md has its results): the CPU's q8/q4 decode loop (one
// activation row against every weight row, backend/cpu/quant_dot_kernels.h) in each instruction-set variant the
// processor has, at the 2B's most common decode shape (k = 2,048; --k N, a multiple of 512, for another, such as the
// down projection's 6,144), in two settings that separate the two limits:
//   cache:  one thread over 128 weight rows (at k = 2,048 q8 272 KiB, q4 144 KiB with the scales: L2-resident; at
//           6,144 three times that, within L2 only where it holds 1 MB or more) again and again: the kernel's own
//           rate, what a core can compute;
//   stream: the threads over 256 MiB of weight rows (--mib N: this project's 2-core machine reports 480 MiB of L3,
//           so 1,024 there), each thread's rows in order ("1 run") and as kReadStreams runs read side by side as the
//           products read them ("4 runs", a row of each in turn), beside a plain read of the same bytes by the same
//           threads in the same orders (the memory's rate), and a plain read of runs 64 KB apart that takes 256 bytes
//           of each run's row in turn rather than whole rows; then handed out as a decode hands them (chunks of 64
//           rows, guided chunks).
// A variant whose cache rate per core is below (stream bandwidth / threads) cannot keep up with memory at that
// thread count. GB/s count the weight bytes and their f16 scales, as the bench's decode roofline does (the plain
// reads touch one scale a row, so their GB/s are 3-9% high).
// Build against a release tree and run (QVL_THREADS is not read; pass the thread counts):
//   g++ -std=c++20 -O2 -mavx2 -mfma -Iengine tools/microbench/cpu_quant_dot.cpp -Lbuild/release/lib -lqvl-engine \
//       -Wl,-rpath,$PWD/build/release/lib -pthread -o /tmp/cpu_quant_dot && /tmp/cpu_quant_dot [--k N] [--mib N] \
//       [--group N] 1 4 16
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/memory_bandwidth.h"
#include "backend/cpu/quant_dot_kernels.h"
#include "backend/weight_format.h"
#include "core/thread_pool.h"

using Clock = std::chrono::steady_clock;
using qvl::cpu::QuantDot;
using qvl::cpu::QuantDotKernels;

namespace {

std::size_t kK = 2048, kBlocks = kK / 32;  // --k
int kGroupShift = 0;                        // --group 32 << shift (q8's 128: 2)
std::size_t groups_of_row() { return (kBlocks + (std::size_t(1) << kGroupShift) - 1) >> kGroupShift; }

struct Matrix {
  std::size_t rows, row_bytes;
  std::vector<uint8_t> values;
  std::vector<uint16_t> scales;  // one f16 a group
};

Matrix random_matrix(std::size_t rows, bool q4, std::mt19937& rng) {
  Matrix m{rows, q4 ? kK / 2 : kK, {}, {}};
  m.values.resize(rows * m.row_bytes);
  for (auto& v : m.values) v = uint8_t(q4 ? rng() : 1 + rng() % 255);  // q8: -127..127 (as a byte), never -128
  m.scales.assign(rows * groups_of_row(), 0x2000);  // 2^-7 as f16
  return m;
}

struct Activation {
  std::vector<int8_t> q = std::vector<int8_t>(kK);
  std::vector<float> scales = std::vector<float>(kBlocks);
  std::vector<int32_t> sums = std::vector<int32_t>(kBlocks);
};

// Rows [begin, end) in `runs` runs read side by side, a row of each in turn: the range cut into windows of
// runs x spacing rows, each window's runs `spacing` rows apart (spacing 0: the whole range's runs, far apart).
template <typename Visit>
void in_runs(std::size_t begin, std::size_t end, std::size_t runs, std::size_t spacing, Visit&& visit) {
  const std::size_t part = spacing ? spacing : (end - begin) / runs;
  std::size_t w = begin;
  for (; part > 0 && w + runs * part <= end; w += runs * part)
    for (std::size_t i = 0; i < part; ++i)
      for (std::size_t r = 0; r < runs; ++r) visit(w + r * part + i);
  for (; w < end; ++w) visit(w);
}

// Rows [begin, end) of m against x, one kernel call a row as cpu_products makes them.
void rows(const QuantDotKernels& k, bool q4, const Matrix& m, const Activation& x, float* y, std::size_t begin,
          std::size_t end, std::size_t runs, std::size_t spacing) {
  const auto dot = q4 ? k.q4 : k.q8;
  in_runs(begin, end, runs, spacing, [&](std::size_t j) {
    dot({.x = x.q.data(), .x_scales = x.scales.data(), .x_sums = x.sums.data(), .rows = 1, .blocks = kBlocks,
         .w = m.values.data() + j * m.row_bytes, .w_scales = m.scales.data() + j * groups_of_row(), .group_shift = kGroupShift,
         .y = y + j, .y_stride = 1});
  });
}

template <typename F>
double median_seconds(int repeats, F&& f) {
  f();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double bytes_of(const Matrix& m) { return double(m.values.size() + 2 * m.scales.size()); }

volatile uint64_t sink;

// Row j's values summed into acc with plain 256-bit loads, and the row's first scale.
void sum_row(__m256i& acc, const Matrix& m, std::size_t j) {
  const auto* p = reinterpret_cast<const __m256i*>(m.values.data() + j * m.row_bytes);
  for (std::size_t i = 0; i < m.row_bytes / 32; ++i) acc = _mm256_add_epi64(acc, _mm256_loadu_si256(p + i));
  acc = _mm256_add_epi64(acc, _mm256_set1_epi64x(m.scales[j * groups_of_row()]));
}

// The same threads summing the same rows with plain 256-bit loads (and the scales), in the same order: the memory's
// rate.
double plain_read(qvl::ThreadPool& pool, const Matrix& m, std::size_t runs, std::size_t spacing) {
  return median_seconds(5, [&] {
    std::atomic<uint64_t> total{0};
    pool.parallel_for(m.rows, 16, [&](std::size_t begin, std::size_t end) {
      __m256i acc = _mm256_setzero_si256();
      in_runs(begin, end, runs, spacing, [&](std::size_t j) { sum_row(acc, m, j); });
      total += uint64_t(_mm256_extract_epi64(acc, 0) + _mm256_extract_epi64(acc, 3));
    });
    sink = total;
  });
}

// The plain read of runs `part` rows apart (kReadStreams of them) taking 256 bytes of each run's row in turn: each
// run's stream kept going while the others are read, where plain_read and the kernels take a whole row of one run
// at a time (at k = 6,144 a q8 row is 6 KB).
double plain_read_interleaved(qvl::ThreadPool& pool, const Matrix& m, std::size_t part) {
  constexpr std::size_t kRuns = qvl::cpu::kReadStreams;
  return median_seconds(5, [&] {
    std::atomic<uint64_t> total{0};
    pool.parallel_for(m.rows, 16, [&](std::size_t begin, std::size_t end) {
      __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      std::size_t w = begin;
      for (; w + kRuns * part <= end; w += kRuns * part)
        for (std::size_t i = 0; i < part; ++i) {
          for (std::size_t offset = 0; offset + 256 <= m.row_bytes; offset += 256)
            for (std::size_t r = 0; r < kRuns; ++r) {
              const auto* p = reinterpret_cast<const __m256i*>(m.values.data() + (w + r * part + i) * m.row_bytes + offset);
              for (int v = 0; v < 8; ++v) acc[v & 1] = _mm256_add_epi64(acc[v & 1], _mm256_loadu_si256(p + v));
            }
          for (std::size_t r = 0; r < kRuns; ++r)
            acc[0] = _mm256_add_epi64(acc[0], _mm256_set1_epi64x(m.scales[(w + r * part + i) * groups_of_row()]));
        }
      for (; w < end; ++w) sum_row(acc[0], m, w);  // what the windows leave, in order
      total += uint64_t(_mm256_extract_epi64(acc[0], 0) + _mm256_extract_epi64(acc[1], 3));
    });
    sink = total;
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads;
  std::size_t mib = 256;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--k" || arg == "--mib" || arg == "--group") {
      const long long value = i + 1 < argc ? std::strtoll(argv[++i], nullptr, 10) : 0;
      if (arg == "--mib" && value > 0) mib = std::size_t(value);
      else if (arg == "--k" && value > 0 && value % 512 == 0) kK = std::size_t(value), kBlocks = kK / 32;
      else if (arg == "--group") {
        try {
          qvl::check_group(qvl::WeightFormat::Q8, value);
        } catch (const std::exception& e) {
          return std::fprintf(stderr, "--group: %s\n", e.what()), 2;
        }
        kGroupShift = std::countr_zero(uint64_t(value) / uint64_t(qvl::kQuantBlock));
      } else {
        return std::fprintf(stderr, "%s takes a positive number (--k: a multiple of 512)\n", arg.c_str()), 2;
      }
    } else {
      threads.push_back(std::atoi(argv[i]));
    }
  }
  if (threads.empty()) threads = {1};
  std::mt19937 rng(7);
  Activation x;
  std::vector<float> xf(kK);
  for (auto& v : xf) v = std::normal_distribution<float>(0, 1)(rng);
  qvl::cpu::quant_dot_kernels().quantize_row(xf.data(), int64_t(kK), x.q.data(), x.scales.data(), x.sums.data());

  std::vector<const QuantDotKernels*> variants{qvl::cpu::quant_dot_kernels_avx2()};
  if (auto* v = qvl::cpu::quant_dot_kernels_avx512_vnni()) variants.push_back(v);
  std::printf("default variant: %s\n", qvl::cpu::quant_dot_kernels().name);

  for (bool q4 : {false, true}) {
    const Matrix small = random_matrix(128, q4, rng);
    const Matrix big = random_matrix((mib << 20) / (q4 ? kK / 2 : kK), q4, rng);
    std::vector<float> y(big.rows);
    for (const QuantDotKernels* k : variants) {
      if (!k) continue;
      const double t = median_seconds(21, [&] { for (int i = 0; i < 64; ++i) rows(*k, q4, small, x, y.data(), 0, small.rows, 1, 0); }) / 64;
      std::printf("%s %-12s cache 1 thread: %6.2f GB/s  %5.2f ns a block\n", q4 ? "q4" : "q8", k->name,
                  bytes_of(small) / t / 1e9, t * 1e9 / double(small.rows * kBlocks));
    }
    for (int n : threads) {
      qvl::ThreadPool pool(n);
      // In order; kReadStreams runs far apart; and runs close together (windows of a few pages a run).
      const std::size_t rows_64k = std::max<std::size_t>(1, 65536 / big.row_bytes), rows_8k = std::max<std::size_t>(1, 8192 / big.row_bytes);
      for (const auto [runs, spacing] : {std::pair<std::size_t, std::size_t>{1, 0}, {qvl::cpu::kReadStreams, 0},
                                         {qvl::cpu::kReadStreams, rows_64k}, {qvl::cpu::kReadStreams, rows_8k}}) {
        std::printf("%s stream %2d threads, %zu run%s %-12s: plain read %6.1f GB/s", q4 ? "q4" : "q8", n, runs,
                    runs > 1 ? "s" : " ", runs == 1 ? "" : spacing == 0 ? "far apart" : spacing == rows_64k ? "64 KB apart" : "8 KB apart",
                    bytes_of(big) / plain_read(pool, big, runs, spacing) / 1e9);
        for (const QuantDotKernels* k : variants) {
          const double t = median_seconds(5, [&] {
            pool.parallel_for(big.rows, 16, [&](std::size_t b, std::size_t e) { rows(*k, q4, big, x, y.data(), b, e, runs, spacing); });
          });
          std::printf("  %s %6.1f GB/s", k->name, bytes_of(big) / t / 1e9);
        }
        std::printf("\n");
      }
      std::printf("%s stream %2d threads, 4 runs 64 KB apart, 256 bytes of each in turn: plain read %6.1f GB/s\n",
                  q4 ? "q4" : "q8", n, bytes_of(big) / plain_read_interleaved(pool, big, rows_64k) / 1e9);
      // As the decode hands rows out (cpu_products.cpp): chunks of 64 rows from a counter, the way main did before
      // 2026-11-28, and guided chunks (ThreadPool::parallel_guided), each read in order or as runs 64 KB apart.
      for (const bool guided : {false, true})
        for (const bool runs : {false, true}) {
          std::printf("%s stream %2d threads, %-14s %-11s:", q4 ? "q4" : "q8", n, guided ? "guided chunks," : "chunks of 64,",
                      runs ? "runs" : "in order");
          for (const QuantDotKernels* k : variants) {
            const auto chunk = [&](std::size_t b, std::size_t e) {
              rows(*k, q4, big, x, y.data(), b, e, runs ? qvl::cpu::kReadStreams : 1, runs ? rows_64k : 0);
            };
            const double t = median_seconds(5, [&] {
              if (guided) pool.parallel_guided(big.rows, 64, chunk);
              else pool.parallel_chunks(big.rows, 64, chunk);
            });
            std::printf("  %s %6.1f GB/s", k->name, bytes_of(big) / t / 1e9);
          }
          std::printf("\n");
        }
    }
  }
}
