// Every SIMD variant of the CPU's packed GEMM this processor can run gives the plain C++ chain of fused
// multiply-adds bit for bit, for each weight type, over shapes that exercise the register tile's tails (activation
// rows, weight rows), the transposing loops' depth and what they leave, more than one block of depth and none; rows
// packed once and extended in steps; and the CPU backend's products on either side of the row threshold against a
// double-precision reference, and a product in chunks over the threads against the reference chain.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "test_support.h"

namespace qvl::cpu {
namespace {

struct Weights {
  std::vector<float> w32;
  std::vector<uint16_t> w16;
  DType type;
  std::size_t k;
  const void* data() const { return type == DType::F32 ? static_cast<const void*>(w32.data()) : w16.data(); }
  std::size_t stride() const { return k * (type == DType::F32 ? 4 : 2); }
};

Weights random_weights(DType type, std::size_t rows, std::size_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Weights w{std::vector<float>(rows * k), {}, type, k};
  for (auto& e : w.w32) e = normal(rng);
  if (type != DType::F32)
    for (float e : w.w32) w.w16.push_back(type == DType::BF16 ? f32_to_bf16(e) : f32_to_f16(e));
  return w;
}

std::vector<const GemmKernels*> variants() {
  std::vector<const GemmKernels*> v;
  for (const GemmKernels* g : {gemm_kernels_avx2(), gemm_kernels_avx512()})
    if (g) v.push_back(g);
  return v;
}

TEST(GemmKernels, EveryVariantGivesTheReferenceChainBitForBit) {
  const auto tested = variants();
  if (tested.empty()) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512; the dot tiles serve";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (const GemmKernels* g : tested)
    for (DType t : {DType::BF16, DType::F16, DType::F32})
      for (std::size_t k : {0u, 1u, 7u, 32u, 45u, 300u, 600u})
        for (std::size_t rows : {1u, 5u, 8u, 13u, 64u})
          for (std::size_t w_rows : {3u, 16u, 33u, 70u}) {
            std::vector<float> x(rows * k);
            for (auto& e : x) e = normal(rng);
            const Weights w = random_weights(t, w_rows, k, rng);
            // The products' rows [begin, end) of the weights, into y with a column on either side that must stay.
            const std::size_t begin = w_rows > 3 ? 2 : 0, end = w_rows, ys = w_rows + 1;
            std::vector<float> want(rows * ys, -7.0f), got(want);
            gemm_reference(x.data(), rows, k, static_cast<const char*>(w.data()) + begin * w.stride(), w.stride(), t,
                           end - begin, want.data() + begin, ys);
            const PackedActivations packed(x.data(), rows, k, g->mr);
            gemm_rows(*g, packed, k, w.data(), w.stride(), t, begin, end, got.data(), ys, nullptr);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                << g->name << " " << dtype_name(t) << " k=" << k << " rows=" << rows << " weight rows " << begin
                << ".." << end;
          }
  std::printf("compared %zu variant(s) with the reference chain; in use: %s\n", tested.size(),
              gemm_kernels() ? gemm_kernels()->name : "none (dot tiles)");
}

// gemm_by_rows (an attention's probabilities times its values: b stored by rows of k, f32 or bf16, only its first
// rows read): the same chains as the reference over b's columns, bit for bit.
TEST(GemmKernels, ByRowsGivesTheReferenceChainBitForBit) {
  const auto tested = variants();
  if (tested.empty()) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const GemmKernels* g : tested)
    for (const DType type : {DType::F32, DType::BF16})
      for (std::size_t k : {0u, 5u, 64u, 300u})
        for (std::size_t rows : {1u, 7u, 64u})
          for (std::size_t n : {8u, 64u, 40u}) {
            const std::size_t b_rows = k > 3 ? k - 3 : k, b_stride = n + 5;  // rows past b_rows count as zeros
            std::vector<float> x(rows * k), b(std::max<std::size_t>(b_rows, 1) * b_stride);
            std::vector<uint16_t> b16;
            for (auto& e : x) e = normal(rng);
            for (auto& e : b) {
              e = normal(rng);
              if (type == DType::BF16) e = bf16_to_f32(b16.emplace_back(f32_to_bf16(e)));  // the values b16 holds
            }
            // The reference reads b's columns as weight rows: w[j][i] = b[i][j] (0 past b_rows).
            std::vector<float> w(n * k, 0.0f);
            for (std::size_t j = 0; j < n; ++j)
              for (std::size_t i = 0; i < b_rows; ++i) w[j * k + i] = b[i * b_stride + j];
            std::vector<float> want(rows * n), got(rows * n, -7.0f);
            gemm_reference(x.data(), rows, k, w.data(), k * 4, DType::F32, n, want.data(), n);
            const void* stored = type == DType::BF16 ? static_cast<const void*>(b16.data()) : b.data();
            gemm_by_rows(*g, PackedActivations(x.data(), rows, k, g->mr), k, stored, type, b_stride, b_rows, n,
                         got.data(), n);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                << g->name << " " << dtype_name(type) << " k=" << k << " rows=" << rows << " n=" << n;
          }
}

// Rows packed beforehand and extended in steps (an attention's keys, a block of queries at a time): every step's
// product gives the reference chain over the rows packed so far, or fewer, bit for bit, the partly filled panel packed
// again as rows join it; other rows, or the same place read with another stride, start the packing over.
TEST(GemmKernels, RowsPackedInStepsGiveTheReferenceChainBitForBit) {
  const auto tested = variants();
  if (tested.empty()) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (const GemmKernels* g : tested)
    for (DType t : {DType::F32, DType::BF16})
      for (std::size_t k : {5u, 64u, 128u, 300u}) {
        const std::size_t rows = 9, total = 100;
        std::vector<float> x(rows * k);
        for (auto& e : x) e = normal(rng);
        const Weights w = random_weights(t, total, k, rng);
        const PackedActivations packed(x.data(), rows, k, g->mr);
        PackedRows keys;
        const auto check = [&](const void* data, std::size_t stride, std::size_t n, const char* what) {
          std::vector<float> want(rows * n), got(rows * n, -7.0f);
          gemm_reference(x.data(), rows, k, data, stride, t, n, want.data(), n);
          gemm_packed_rows(*g, packed, keys, n, got.data(), n);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << g->name << " " << dtype_name(t) << " k=" << k << " " << what << " " << n << " rows";
        };
        for (std::size_t n : {1u, 20u, 33u, 33u, 64u, 100u}) {  // steps inside a panel, across panels, none
          keys.extend(*g, w.data(), w.stride(), t, k, n);
          ASSERT_EQ(keys.rows(), n);
          check(w.data(), w.stride(), n, "packed");
        }
        check(w.data(), w.stride(), 40, "fewer than the packed");
        // Rows from another place (the next kv head's keys) are packed afresh, not taken from the ones before.
        const Weights other = random_weights(t, total, k, rng);
        keys.extend(*g, other.data(), other.stride(), t, k, 40);
        ASSERT_EQ(keys.rows(), 40u);
        check(other.data(), other.stride(), 40, "repacked");
        // The same first row read every other row: a new stride starts over too.
        keys.extend(*g, other.data(), 2 * other.stride(), t, k, 30);
        ASSERT_EQ(keys.rows(), 30u);
        check(other.data(), 2 * other.stride(), 30, "another stride");
        std::vector<float> y(rows * 31);
        EXPECT_THROW(gemm_packed_rows(*g, packed, keys, 31, y.data(), 31), Error);
      }
}

TEST(GemmKernels, AStopEndsTheRowsBeforeTheirPanels) {
  const auto tested = variants();
  if (tested.empty()) GTEST_SKIP() << "skipped: this processor has neither AVX2 nor AVX-512";
  std::mt19937 rng(6);
  const std::size_t rows = 16, k = 64, w_rows = 96;
  const std::vector<float> x(rows * k, 1.0f);
  const Weights w = random_weights(DType::BF16, w_rows, k, rng);
  const std::atomic<bool> stop{true};
  for (const GemmKernels* g : tested) {
    std::vector<float> y(rows * w_rows, -7.0f);
    gemm_rows(*g, PackedActivations(x.data(), rows, k, g->mr), k, w.data(), w.stride(), DType::BF16, 0, w_rows,
              y.data(), w_rows, &stop);
    for (float v : y) ASSERT_EQ(v, -7.0f) << g->name << ": a stopped product wrote its outputs";
  }
}

// Through the backend on either side of each variant's row threshold (dot tiles below it, the GEMM from it), with a
// bias: every product within float rounding of a double-precision reference.
TEST(GemmKernels, TheCpuLinearAgreesWithADoubleReferenceOnEitherSideOfTheThreshold) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const int64_t n = 70, k = 300;
  const LinearWeights w = LinearWeights::of(test::random_normal({n, k}, 11).to(DType::BF16), test::random_normal({n}, 12));
  const std::vector<float> wv = w.weight.to_f32_vector(), bias = w.bias.to_f32_vector();
  for (const int64_t rows : {31, 32, 33, 63, 64, 65}) {
    const Tensor x = test::random_normal({rows, k}, uint32_t(13 + rows));
    Tensor y = be->alloc({rows, n});
    be->linear(x, w, y);
    const std::vector<float> xv = x.to_f32_vector(), got = y.to_f32_vector();
    // Each output against its terms' magnitude: a sum of k float products is within a few k·2^-24 of it, far
    // tighter than any product with a wrong or missing term.
    double worst = 0;
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t j = 0; j < n; ++j) {
        double want = bias[std::size_t(j)], size = std::abs(want);
        for (int64_t i = 0; i < k; ++i) {
          const double term = double(xv[std::size_t(m * k + i)]) * wv[std::size_t(j * k + i)];
          want += term, size += std::abs(term);
        }
        worst = std::max(worst, std::abs(want - double(got[std::size_t(m * n + j)])) / size);
      }
    EXPECT_LT(worst, 2e-6) << rows << " rows";
  }
}

// A prefill's product hands its weight rows out in chunks of 64 from a counter (cpu_products.cpp, kChunkRows), to
// whichever thread is free: with four chunks a thread and a tail of 37 rows (not a multiple of the chunk or of either
// variant's panel), every output must still be the reference chain's bits in its own place (a chunk lost or written
// into another's place would differ). 65 activation rows reach the GEMM on AVX2 and AVX-512.
TEST(GemmKernels, APrefillProductInChunksOverTheThreadsGivesTheReferenceChainBitForBit) {
  // The backend's products run the packed GEMM only where gemm_kernels() chose one: not with the plain C++ kernels
  // forced ($QVL_CPU_KERNELS=generic), whose dot tiles sum in another order.
  if (!gemm_kernels()) GTEST_SKIP() << "skipped: the dot tiles serve (no AVX2, or the plain C++ kernels forced)";
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const int64_t rows = 65, k = 96, n = int64_t(ThreadPool::global().size()) * 256 + 37;
  const LinearWeights w = LinearWeights::of(test::random_normal({n, k}, 21).to(DType::BF16));
  const Tensor x = test::random_normal({rows, k}, 22);
  Tensor y = be->alloc({rows, n});
  be->linear(x, w, y);
  std::vector<float> want(std::size_t(rows * n));
  gemm_reference(x.data<float>(), std::size_t(rows), std::size_t(k), w.weight.raw(), std::size_t(k) * 2, DType::BF16,
                 std::size_t(n), want.data(), std::size_t(n));
  const std::vector<float> got = y.to_f32_vector();
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << "row " << i / std::size_t(n) << ", output " << i % std::size_t(n) << ": " << got[i] << " against " << want[i];
}

}  // namespace
}  // namespace qvl::cpu
