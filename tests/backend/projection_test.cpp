// Projection descriptors (backend/projection.h) on the CPU: each epilogue and prologue against a direct evaluation
// in double precision written here (not through the backend's ops), the CPU's fused path against the unfused
// reference, and the shape checks every backend shares.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/quantize.h"
#include "core/error.h"
#include "test_support.h"

namespace qvl {
namespace {

using Matrix = std::vector<std::vector<double>>;

Matrix rows(const Tensor& t) {
  const int64_t width = t.dim(t.rank() - 1), n = t.numel() / width;
  const std::vector<float> v = t.to_f32_vector();
  Matrix m(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(width)));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < width; ++j) m[std::size_t(i)][std::size_t(j)] = v[std::size_t(i * width + j)];
  return m;
}
Matrix product(const Matrix& x, const LinearWeights& w) {
  const Matrix wm = rows(w.weight);
  const std::vector<float> bias = w.bias.raw() ? w.bias.to_f32_vector() : std::vector<float>(wm.size(), 0.0f);
  Matrix y(x.size(), std::vector<double>(wm.size()));
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = 0; j < wm.size(); ++j) {
      double s = bias[j];
      for (std::size_t e = 0; e < x[i].size(); ++e) s += x[i][e] * wm[j][e];
      y[i][j] = s;
    }
  return y;
}
// Norm over groups of `norm` weights inside each row.
Matrix normed(const Matrix& x, const NormWeights& norm, bool layer, double eps) {
  const std::vector<float> w = norm.weight.to_f32_vector();
  const std::vector<float> b = layer ? norm.bias.to_f32_vector() : std::vector<float>(w.size(), 0.0f);
  Matrix y = x;
  const std::size_t g = w.size();
  for (auto& row : y)
    for (std::size_t start = 0; start < row.size(); start += g) {
      double mean = 0, square = 0;
      for (std::size_t e = 0; e < g; ++e) mean += row[start + e] / double(g);
      for (std::size_t e = 0; e < g; ++e) {
        const double d = layer ? row[start + e] - mean : row[start + e];
        square += d * d / double(g);
      }
      for (std::size_t e = 0; e < g; ++e) {
        const double centred = layer ? row[start + e] - mean : row[start + e];
        row[start + e] = centred / std::sqrt(square + eps) * w[e] + b[e];
      }
    }
  return y;
}
double max_difference(const Tensor& t, const Matrix& expected) {
  const Matrix got = rows(t);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    for (std::size_t j = 0; j < got[i].size(); ++j) worst = std::max(worst, std::abs(got[i][j] - expected[i][j]));
  return worst;
}

class Projections : public ::testing::Test {
protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
  LinearWeights linear(int64_t out, int64_t in, uint32_t seed, bool bias = true) {
    return LinearWeights::of(test::random_normal({out, in}, seed).to(DType::BF16),
                             bias ? test::random_normal({out}, seed + 100) : Tensor());
  }
  NormWeights norm(int64_t width, uint32_t seed) {
    return {test::random_normal({width}, seed), test::random_normal({width}, seed + 1)};
  }
};

TEST_F(Projections, ThreeMatricesReadTheRmsNormedInput) {
  const Tensor x = test::random_normal({3, 16}, 1);
  const LinearWeights q = linear(8, 16, 2), k = linear(4, 16, 3), v = linear(4, 16, 4);
  const NormWeights n = norm(16, 5);
  Tensor yq = be->alloc({3, 8}), yk = be->alloc({3, 4}), yv = be->alloc({3, 4}), slot;
  be->project(Projection::of(x, q, k, v, yq, yk, yv).reading_norm(RowNorm::rms(n, 1e-6f), slot));
  const Matrix in = normed(rows(x), n, false, 1e-6);
  EXPECT_LT(max_difference(yq, product(in, q)), 1e-4);
  EXPECT_LT(max_difference(yk, product(in, k)), 1e-4);
  EXPECT_LT(max_difference(yv, product(in, v)), 1e-4);
  EXPECT_LT(max_difference(slot, in), 1e-5);  // the slot holds the normed rows the products read
}

TEST_F(Projections, SwiGLUGeluAndTheGroupedLayerNorm) {
  const Tensor x = test::random_normal({5, 12}, 6);
  const LinearWeights gate = linear(7, 12, 7, false), up = linear(7, 12, 8, false), fc = linear(9, 12, 9);
  Tensor y = be->alloc({5, 7}), scratch = be->alloc({5, 7});
  be->project(Projection::swiglu(x, gate, up, y, scratch));
  Matrix expected = product(rows(x), gate);
  const Matrix u = product(rows(x), up);
  for (std::size_t i = 0; i < expected.size(); ++i)
    for (std::size_t j = 0; j < expected[i].size(); ++j) {
      const double g = expected[i][j];
      expected[i][j] = g / (1 + std::exp(-g)) * u[i][j];
    }
  EXPECT_LT(max_difference(y, expected), 1e-4);
  // A LayerNorm over each third of a row (the vision merger's per-patch norm), then the product and GELU (erf).
  const NormWeights per_patch = norm(4, 10);
  Tensor h = be->alloc({5, 9}), slot;
  be->project(Projection::of(x, fc, h).reading_norm(RowNorm::layer(per_patch, 1e-6f), slot).gelu(GeluKind::Erf));
  Matrix hidden = product(normed(rows(x), per_patch, true, 1e-6), fc);
  for (auto& row : hidden)
    for (double& e : row) e = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
  EXPECT_LT(max_difference(h, hidden), 1e-4);
}

// The activation slot (the next product's input): on the CPU it is the projection's own output, so the activation
// is neither copied nor converted; only a SwiGLU or GELU epilogue has one.
TEST_F(Projections, TheActivationSlotOnTheCpuIsTheOutputItself) {
  const Tensor x = test::random_normal({5, 12}, 6);
  const LinearWeights gate = linear(7, 12, 7, false), up = linear(7, 12, 8, false), fc = linear(9, 12, 9);
  Tensor y = be->alloc({5, 7}), scratch = be->alloc({5, 7}), activated, unslotted = be->alloc({5, 7});
  be->project(Projection::swiglu(x, gate, up, unslotted, scratch));
  be->project(Projection::swiglu(x, gate, up, y, scratch).into_operand(activated));
  EXPECT_EQ(activated.raw(), y.raw());
  EXPECT_EQ(max_difference(activated, rows(unslotted)), 0.0);
  Tensor h = be->alloc({5, 9}), gelu_slot;
  be->project(Projection::of(x, fc, h).gelu(GeluKind::Tanh).into_operand(gelu_slot));
  EXPECT_EQ(gelu_slot.raw(), h.raw());
  Tensor store_slot;
  EXPECT_THROW(be->project(Projection::of(x, fc, h).into_operand(store_slot)), Error);
}

TEST_F(Projections, AResidualAddClosesWithTheNextNormAndTheNextProjectionReadsIt) {
  const Tensor in = test::random_normal({4, 6}, 11);
  const LinearWeights o = linear(10, 6, 12), next = linear(3, 10, 13);
  const NormWeights n = norm(10, 14);
  Tensor x = test::random_normal({4, 10}, 15), scratch = be->alloc({4, 10}), slot, y = be->alloc({4, 3});
  Matrix expected_x = rows(x);
  const Matrix p = product(rows(in), o);
  for (std::size_t i = 0; i < p.size(); ++i)
    for (std::size_t j = 0; j < p[i].size(); ++j) expected_x[i][j] += p[i][j];
  for (const Fusions& fusions : {Fusions{}, Fusions::none()}) {
    Tensor xi = x.to(DType::F32);
    slot = Tensor();
    be->set_fusions(fusions);
    be->project(Projection::add_to(xi, in, o, scratch).then(RowNorm::layer(n, 1e-5f), slot));
    be->project(Projection::of(xi, next, y).reading_norm(RowNorm::layer(n, 1e-5f), slot, true));
    EXPECT_LT(max_difference(xi, expected_x), 1e-4);
    EXPECT_LT(max_difference(y, product(normed(expected_x, n, true, 1e-5), next)), 1e-3);
  }
  // normed_ready: the products read the slot as the previous projection left it (here: zeros), not a fresh norm.
  slot = Tensor::zeros(DType::F32, {4, 10});
  be->project(Projection::of(x, next, y).reading_norm(RowNorm::layer(n, 1e-5f), slot, true));
  EXPECT_LT(max_difference(y, product(Matrix(4, std::vector<double>(10, 0.0)), next)), 1e-6);
}

// The CPU's fused loops (q+k+v as one loop over the matrices' rows, gate/up with SiLU ⊙ up in each chunk of rows)
// give the unfused bits. With k = 2,048, at 1, 3 and 130 activation rows (two blocks of 64 and a part), the rows in
// chunks of 64 (two threads or more: one may take both): q+k+v's 98 rows (50 + 24 + 24) cut at 64, a chunk holding
// all of q and part of k, the next the rest of k and v; gate/up's 100 at 64, a second chunk of 36 (a SiLU tail of
// 4); bf16, q8 and q4 weights and a mix of them, all with biases.
TEST_F(Projections, TheCpusFusedLoopsGiveTheUnfusedBits) {
  constexpr int64_t k = 2048;
  const auto weights = [&](int64_t out, uint32_t seed, WeightFormat format) {
    LinearWeights w = linear(out, k, seed);
    if (format == WeightFormat::BF16) return w;
    LinearWeights quantised = quantize_matrix(w.weight, format, kQuantBlock, "w");
    quantised.bias = w.bias;
    return quantised;
  };
  const auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), std::size_t(a.nbytes())) == 0;
  };
  using F = WeightFormat;
  const std::vector<std::array<F, 3>> mixes{{F::BF16, F::BF16, F::BF16}, {F::Q8, F::Q8, F::Q8}, {F::Q4, F::Q4, F::Q4},
                                            {F::Q4, F::BF16, F::Q8}};
  for (const auto& mix : mixes) {
    const LinearWeights q = weights(50, 21, mix[0]), kw = weights(24, 22, mix[1]), v = weights(24, 23, mix[2]);
    const LinearWeights gate = weights(100, 24, mix[0]), up = weights(100, 25, mix[0]);  // one shape (check_projection)
    for (const int64_t m : {1, 3, 130}) {
      const Tensor x = test::random_normal({m, k}, 26 + uint32_t(m));
      std::array<std::vector<Tensor>, 2> out;  // fused, unfused: q, k, v, SwiGLU, up
      for (int way = 0; way < 2; ++way) {
        be->set_fusions(way == 0 ? Fusions{} : Fusions::none());
        auto& o = out[std::size_t(way)];
        for (const int64_t n : {50, 24, 24, 100, 100}) o.push_back(be->alloc({m, n}));
        be->project(Projection::of(x, q, kw, v, o[0], o[1], o[2]));
        be->project(Projection::swiglu(x, gate, up, o[3], o[4]));
      }
      for (std::size_t i = 0; i < 4; ++i)
        EXPECT_TRUE(same_bits(out[0][i], out[1][i])) << "output " << i << ", " << m << " rows, formats "
                                                     << format_traits(mix[0]).name << "/" << format_traits(mix[1]).name
                                                     << "/" << format_traits(mix[2]).name;
    }
  }
  be->set_fusions({});
}

// The vision tower's q and k rotated after their biases (Projection::rotating), v not: rotate_half pairs (e, e + d/2)
// of each head with per-row tables, evaluated here in double; the CPU's fused q+k+v loop and the unfused reference.
TEST_F(Projections, QAndKAreRotatedAfterTheirBiasesAndVIsNot) {
  constexpr int64_t rows_n = 5, heads = 2, d = 8, width = heads * d;
  const Tensor x = test::random_normal({rows_n, 12}, 30), cos = test::random_normal({rows_n, d}, 31),
               sin = test::random_normal({rows_n, d}, 32);
  const LinearWeights q = linear(width, 12, 33), k = linear(width, 12, 34), v = linear(width, 12, 35);
  const std::vector<float> c = cos.to_f32_vector(), sn = sin.to_f32_vector();
  const auto rotated = [&](Matrix m) {
    for (std::size_t r = 0; r < m.size(); ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t e = 0; e < d / 2; ++e) {
          const std::size_t lo = std::size_t(h * d + e), hi = lo + d / 2, t = r * d + std::size_t(e);
          const double a = m[r][lo], b = m[r][hi];
          m[r][lo] = a * c[t] - b * sn[t];
          m[r][hi] = b * c[t + d / 2] + a * sn[t + d / 2];
        }
    return m;
  };
  for (const Fusions& fusions : {Fusions{}, Fusions::none()}) {
    be->set_fusions(fusions);
    Tensor yq = be->alloc({rows_n, heads, d}), yk = be->alloc({rows_n, heads, d}), yv = be->alloc({rows_n, heads, d});
    be->project(Projection::of(x, q, k, v, yq, yk, yv).rotating(cos, sin));
    const char* way = fusions == Fusions{} ? "fused" : "unfused";
    const auto flat = [&](const Tensor& y) { return y.reshaped({rows_n, width}); };  // rows() reads the last dimension
    EXPECT_LT(max_difference(flat(yq), rotated(product(rows(x), q))), 1e-4) << way;
    EXPECT_LT(max_difference(flat(yk), rotated(product(rows(x), k))), 1e-4) << way;
    EXPECT_LT(max_difference(flat(yv), product(rows(x), v)), 1e-4) << way;
  }
  be->set_fusions({});
  Tensor yq = be->alloc({rows_n, heads, d}), yk = be->alloc({rows_n, heads, d}), yv = be->alloc({rows_n, heads, d});
  const Tensor short_table = test::random_normal({rows_n, d / 2}, 36);
  try {
    be->project(Projection::of(x, q, k, v, yq, yk, yv).rotating(short_table, short_table));
    ADD_FAILURE() << "tables narrower than a head were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RoPE tables [5, 4]"), std::string::npos) << e.what();
  }
}

// A backend that runs each call to completion marks its queue with the host's clock.
TEST_F(Projections, QueueMarksOnTheCpuTimeTheWorkBetweenThem) {
  const QueueMark before = be->mark();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const QueueMark after = be->mark();
  const double ms = be->elapsed_ms(before, after);
  EXPECT_GE(ms, 19.0);
  EXPECT_LT(ms, 2000.0);
  EXPECT_LE(be->elapsed_ms(after, after), 0.0);
}

TEST_F(Projections, ShapesThatDoNotFitAreNamed) {
  const Tensor x = test::random_normal({2, 8}, 16);
  const LinearWeights w = linear(4, 6, 17);
  Tensor y = be->alloc({2, 4}), slot;
  const auto message = [&](const Projection& p) {
    try {
      be->project(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(Projection::of(x, w, y)).find("weights [4, 6]"), std::string::npos);
  const LinearWeights fits = linear(4, 8, 18);
  const NormWeights odd = norm(3, 19);
  EXPECT_NE(message(Projection::of(x, fits, y).reading_norm(RowNorm::rms(odd, 1e-6f), slot)).find("do not divide"),
            std::string::npos);
  Projection store = Projection::of(x, fits, y);
  store.then(RowNorm::rms(odd, 1e-6f), slot);
  EXPECT_NE(message(store).find("residual add only"), std::string::npos);
  Tensor residual = be->alloc({2, 5});
  EXPECT_NE(message(Projection::add_to(residual, x, fits, y)).find("residual does not match"), std::string::npos);
}

}  // namespace
}  // namespace qvl
