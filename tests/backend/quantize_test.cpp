// q8/q4 quantisation (backend/quantize.h) and the CPU's integer products: the packing byte by byte, the rounding
// bounds, the refusals, and every kernel variant against a double-precision reference of the same integers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>

#include "backend/backend.h"
#include "backend/cpu/cpu_products.h"
#include "backend/cpu/quant_dot_kernels.h"
#include "backend/quantize.h"
#include "core/thread_pool.h"
#include "core/half.h"
#include "quantized_reference.h"
#include "test_support.h"

namespace qvl {
namespace {

TEST(Quantize, Q4PacksTwoValuesAByteAsTheFormatSays) {
  // One block: x = i - 16. The value of largest magnitude is -16, so the scale is 2 and q = round(x / 2) in [-8, 7].
  Tensor x = Tensor::empty(DType::F32, {1, 32});
  for (int i = 0; i < 32; ++i) x.data<float>()[i] = float(i - 16);
  const LinearWeights q = quantize_matrix(x, WeightFormat::Q4, 32, "w");
  ASSERT_EQ(q.weight.shape(), (Shape{1, 16}));
  EXPECT_EQ(f16_to_f32(q.scales.data<uint16_t>()[0]), 2.0f);
  const auto q4 = [](int i) { return int(std::clamp(std::nearbyint(float(i - 16) / 2.0f), -8.0f, 7.0f)) + 8; };
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q.weight.data<uint8_t>()[j], q4(j) | q4(j + 16) << 4) << "byte " << j;
}

TEST(Quantize, Q8IsTheRoundedQuotientOfTheBlockScale) {
  Tensor x = Tensor::empty(DType::F32, {1, 32});
  for (int i = 0; i < 32; ++i) x.data<float>()[i] = float(i) * 0.25f - 4.0f;  // largest magnitude 4
  const LinearWeights q = quantize_matrix(x, WeightFormat::Q8, 32, "w");
  const float d = f16_to_f32(q.scales.data<uint16_t>()[0]);
  EXPECT_EQ(q.scales.data<uint16_t>()[0], f32_to_f16(4.0f / 127.0f));
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(q.weight.data<int8_t>()[i], int8_t(std::nearbyint(x.data<float>()[i] / d))) << i;
}

// Dequantised values are within half a step of the originals (a whole step for q4 values above 7.5 steps, which
// clamp at 7), for bf16 input, padded widths and every group size.
TEST(Quantize, RoundTripStaysWithinTheStep) {
  for (const WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4})
    for (const int64_t group : {32, 64, 128})
      for (const int64_t in : {48, 64, 200, 2048}) {
        const Tensor w = test::random_normal({5, in}, uint32_t(in + group)).to(DType::BF16);
        const LinearWeights q = quantize_matrix(w, f, group, "w");
        ASSERT_EQ(q.weight.dim(1), format_traits(f).row_bytes(in, group));
        ASSERT_EQ(q.scales.dim(1), (in + group - 1) / group);
        const Tensor back = dequantize_matrix(q);
        const std::vector<float> orig = w.to_f32_vector(), deq = back.to_f32_vector();
        for (int64_t r = 0; r < 5; ++r)
          for (int64_t i = 0; i < in; ++i) {
            const float d = f16_to_f32(q.scales.data<uint16_t>()[r * q.scales.dim(1) + i / group]);  // q4: signed
            const float x = orig[std::size_t(r * in + i)], err = std::fabs(x - deq[std::size_t(r * in + i)]);
            const float bound = f == WeightFormat::Q4 && x / d > 7.5f ? std::fabs(d) : 0.5f * std::fabs(d);
            ASSERT_LE(err, bound * 1.0001f) << format_traits(f).name << " group " << group << " in " << in << " at " << r
                                            << "," << i;
          }
        if (in % group) {  // the padding past the row's width is zeros (q4: stored 8, the last byte's high nibble)
          const uint8_t last = q.weight.data<uint8_t>()[q.weight.dim(1) - 1];
          EXPECT_EQ(f == WeightFormat::Q8 ? last : last >> 4, f == WeightFormat::Q8 ? 0 : 8);
        }
      }
}

TEST(Quantize, RefusesWhatCannotBeQuantised) {
  Tensor w = test::random_normal({3, 64}, 1);
  w.data<float>()[64 + 10] = NAN;
  EXPECT_NE(test::error_within(std::chrono::seconds(10), [&] { quantize_matrix(w, WeightFormat::Q8, 32, "layers.0.q_proj"); })
                .find("layers.0.q_proj holds nan at row 1, column 10"),
            std::string::npos);
  w.data<float>()[64 + 10] = INFINITY;
  EXPECT_NE(test::error_within(std::chrono::seconds(10), [&] { quantize_matrix(w, WeightFormat::Q4, 32, "t"); })
                .find("holds inf"),
            std::string::npos);
  w.data<float>()[64 + 10] = 3e38f;
  EXPECT_NE(test::error_within(std::chrono::seconds(10), [&] { quantize_matrix(w, WeightFormat::Q8, 32, "t"); })
                .find("65504"),
            std::string::npos);
  w.data<float>()[64 + 10] = 0;
  EXPECT_NE(test::error_within(std::chrono::seconds(10), [&] { quantize_matrix(w, WeightFormat::Q8, 48, "t"); })
                .find("powers of two from 32"),
            std::string::npos);
  EXPECT_NE(test::error_within(std::chrono::seconds(10), [&] { quantize_matrix(w, WeightFormat::BF16, 32, "t"); })
                .find("not a quantised format"),
            std::string::npos);
  const LinearWeights q = quantize_matrix(w, WeightFormat::Q4, 32, "t");
  EXPECT_NE(test::error_within(std::chrono::seconds(10), [&] {
              LinearWeights::quantised_of(WeightFormat::Q4, 32, 96, q.weight, q.scales);
            }).find("is u8 [rows, 48]"),
            std::string::npos);
  EXPECT_NE(test::error_within(std::chrono::seconds(10), [&] {
              LinearWeights::quantised_of(WeightFormat::Q8, 32, 64, q.weight, q.scales);
            }).find("i8"),
            std::string::npos);
}

TEST(Quantize, ActivationsRoundToTheBlockScale) {
  std::vector<float> x(40);
  for (int i = 0; i < 40; ++i) x[std::size_t(i)] = std::sin(float(i)) * float(i);
  std::vector<int8_t> q(64);
  std::vector<float> s(2);
  quantize_activation_row(x.data(), 40, q.data(), s.data());
  for (int b = 0; b < 2; ++b) {
    float amax = 0;
    for (int i = b * 32; i < std::min(40, b * 32 + 32); ++i) amax = std::max(amax, std::fabs(x[std::size_t(i)]));
    EXPECT_EQ(s[std::size_t(b)], amax / 127.0f);
  }
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(q[std::size_t(i)], i < 40 ? int8_t(std::nearbyint(x[std::size_t(i)] * (127.0f / (i < 32 ? s[0] * 127.0f : s[1] * 127.0f)))) : 0)
        << i;
  std::vector<float> tiny(32, 1e-38f);  // 127 / max leaves the f32 range: zeros, as the GPU's kernel gives
  quantize_activation_row(tiny.data(), 32, q.data(), s.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[std::size_t(i)], 0);
  x[3] = NAN;  // a non-finite block: NaN scale, zero values (the products then say NaN, not a number)
  quantize_activation_row(x.data(), 40, q.data(), s.data());
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_FALSE(std::isnan(s[1]));
}

TEST(QuantDotKernels, EveryVariantMatchesTheReference) {
  std::vector<const cpu::QuantDotKernels*> variants{&cpu::quant_dot_kernels_generic(), cpu::quant_dot_kernels_avx2(),
                                                    cpu::quant_dot_kernels_avx512_vnni()};
  const auto be = make_cpu_backend();
  for (const WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4})
    // Every way an 8-block step's scales are found: one a block (32), four, two (q8's 128) or one shared (256, 1024).
    for (const int64_t group : {32, 64, 128, 256, 1024})
      for (const int64_t k : {48, 256, 288, 352, 2048})
        for (const int64_t m : {1, 3, 4, 9}) {
          const Tensor x = test::random_normal({m, k}, uint32_t(k + m));
          const LinearWeights w = quantize_matrix(test::random_normal({7, k}, uint32_t(k * 3 + group)), f, group, "w");
          const std::vector<double> want = test::quantized_reference(x, w);
          // Through the backend (the chosen variant, threads, the activations quantised by linear itself) ...
          Tensor y = be->alloc({m, 7});
          be->linear(x, w, y);
          double scale = 0;
          for (double v : want) scale = std::max(scale, std::fabs(v));
          for (std::size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(y.data<float>()[i], want[i], 2e-6 * scale * std::sqrt(double(k)))
                << format_traits(f).name << " group " << group << " k " << k << " m " << m;
          // ... and each variant on its own.
          const test::QuantizedActivations xq = test::quantized_activations(x);
          for (const cpu::QuantDotKernels* v : variants) {
            if (!v) continue;
            std::vector<float> got(static_cast<std::size_t>(m));
            for (int64_t j = 0; j < w.rows(); ++j) {
              (f == WeightFormat::Q8 ? v->q8 : v->q4)({.x = xq.q.data(), .x_scales = xq.scales.data(), .x_sums = xq.sums.data(),
                                                       .rows = std::size_t(m),
                                                       .blocks = std::size_t(xq.blocks),
                                                       .w = w.weight.data<uint8_t>() + j * w.weight.dim(1),
                                                       .w_scales = w.scales.data<uint16_t>() + j * w.scales.dim(1),
                                                       .group_shift = w.group_shift(),
                                                       .y = got.data(), .y_stride = 1});
              for (int64_t r = 0; r < m; ++r)
                ASSERT_NEAR(got[std::size_t(r)], want[std::size_t(r * w.rows() + j)], 2e-6 * scale * std::sqrt(double(k)))
                    << v->name << " " << format_traits(f).name << " k " << k << " m " << m;
            }
          }
        }
  if (!cpu::quant_dot_kernels_avx2()) std::printf("this processor has no AVX2: only the generic variant was compared\n");
  if (!cpu::quant_dot_kernels_avx512_vnni()) std::printf("this processor has no AVX-512 VNNI: that variant was not compared\n");
}

// A decode product hands its rows out in chunks of 64 (cpu_products.cpp), each read in order or as runs of windows
// (cpu_products.h, DecodeReadOrder): with k = 8,192 a chunk holds two windows of q8 (4 runs of 8 rows of 8 KB) or one
// of q4 (4 runs of 16 rows of 4 KB), and the last chunk, 3 rows, is cut in runs of its own. Both orders give every
// row its own dot, in its own place, with the same bits (the reference catches a row missed or written to another's
// place; one computed twice would pass unseen).
TEST(QuantDotKernels, ADecodeOverAWideMatrixGivesEveryRowItsDotInEitherReadOrder) {
  const auto be = make_cpu_backend();
  const cpu::DecodeReadOrder chosen = cpu::decode_read_order();
  constexpr int64_t k = 8192;
  const int64_t rows = int64_t(ThreadPool::global().size()) * 256 + 3;  // four chunks a thread, and a part
  for (const WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4}) {
    const Tensor x = test::random_normal({1, k}, 11);
    const LinearWeights w = quantize_matrix(test::random_normal({rows, k}, 12), f, 32, "w");
    const std::vector<double> want = test::quantized_reference(x, w);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::fabs(v));
    std::vector<Tensor> got;
    for (const cpu::DecodeReadOrder order : {cpu::DecodeReadOrder::InOrder, cpu::DecodeReadOrder::Runs}) {
      cpu::set_decode_read_order(order);
      got.push_back(be->alloc({1, rows}));
      be->linear(x, w, got.back());
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got.back().data<float>()[i], want[i], 2e-6 * scale * std::sqrt(double(k)))
            << format_traits(f).name << " row " << i;
    }
    EXPECT_EQ(std::memcmp(got[0].raw(), got[1].raw(), got[0].nbytes()), 0) << format_traits(f).name;
  }
  cpu::set_decode_read_order(chosen);
}

// Each variant's activation quantiser gives quantize_activation_row's bits: ties rounded to even, a zero block, a
// block too small to scale, NaN and infinite blocks, and rows that end inside a block.
TEST(QuantDotKernels, EveryVariantQuantisesActivationsAsTheReference) {
  std::vector<const cpu::QuantDotKernels*> variants{&cpu::quant_dot_kernels_generic(), cpu::quant_dot_kernels_avx2(),
                                                    cpu::quant_dot_kernels_avx512_vnni()};
  for (const int64_t k : {20, 32, 100, 200, 256, 2048, 2050}) {
    std::mt19937 rng{uint32_t(k)};
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> x(static_cast<std::size_t>(k));
    for (float& v : x) v = normal(rng);
    const auto block = [&](int64_t b) { return std::span<float>(x).subspan(std::size_t(b * kQuantBlock), std::min<std::size_t>(kQuantBlock, std::size_t(k - b * kQuantBlock))); };
    const int64_t blocks = activation_blocks(k);
    // Block b exists when blocks > b; the last one is partial where k is not a multiple of 32 (k = 20: the only block;
    // k = 100: the tiny one).
    if (blocks > 1) {  // ties: max 127 makes the scale 1, so x · (127 / max) is x and 2.5, -3.5, 0.5 are halfway
      auto b = block(1);
      b[0] = 127.0f, b[1] = 2.5f, b[2] = -3.5f, b[3] = 0.5f, b[4] = -0.5f;
    }
    if (blocks > 2) std::fill_n(block(2).begin(), block(2).size(), 0.0f);
    if (blocks > 3) std::fill_n(block(3).begin(), block(3).size(), 1e-38f);  // 127 / max overflows: zeros
    if (blocks > 4) block(4)[7] = NAN;
    if (blocks > 5) block(5)[std::min<std::size_t>(31, block(5).size() - 1)] = -INFINITY;
    std::vector<int8_t> want_q(std::size_t(blocks * kQuantBlock)), got_q(want_q.size());
    std::vector<float> want_s(static_cast<std::size_t>(blocks)), got_s(want_s.size());
    std::vector<int32_t> want_sum(static_cast<std::size_t>(blocks)), got_sum(want_sum.size());
    quantize_activation_row(x.data(), k, want_q.data(), want_s.data(), want_sum.data());
    for (const cpu::QuantDotKernels* v : variants) {
      if (!v) continue;
      for (const bool with_sums : {true, false}) {  // the sums are optional (q8 does not read them)
        std::fill(got_q.begin(), got_q.end(), int8_t(99));  // every output overwritten, none left from before
        std::fill(got_s.begin(), got_s.end(), -1.0f);
        std::fill(got_sum.begin(), got_sum.end(), std::numeric_limits<int32_t>::min());
        v->quantize_row(x.data(), k, got_q.data(), got_s.data(), with_sums ? got_sum.data() : nullptr);
        EXPECT_EQ(got_q, want_q) << v->name << " k " << k;
        if (with_sums) {
          EXPECT_EQ(got_sum, want_sum) << v->name << " k " << k;
        }
        for (std::size_t b = 0; b < want_s.size(); ++b)
          EXPECT_TRUE(std::isnan(want_s[b]) ? std::isnan(got_s[b]) : got_s[b] == want_s[b])
              << v->name << " k " << k << " block " << b << ": " << got_s[b] << " vs " << want_s[b];
      }
    }
  }
}

TEST(Quantize, QuantisedEmbeddingRowsAreTheDequantisedRows) {
  const auto be = make_cpu_backend();
  const LinearWeights table = quantize_matrix(test::random_normal({20, 48}, 9), WeightFormat::Q8, 32, "embed");
  Tensor y = be->alloc({2, 48});
  be->embed(table, std::vector<int32_t>{19, 4}, y);
  const Tensor all = dequantize_matrix(table);
  for (int64_t i = 0; i < 48; ++i) {
    EXPECT_EQ(y.data<float>()[i], all.data<float>()[19 * 48 + i]);
    EXPECT_EQ(y.data<float>()[48 + i], all.data<float>()[4 * 48 + i]);
  }
}

}  // namespace
}  // namespace qvl
