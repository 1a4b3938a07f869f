#include "backend/cpu/cpu_products.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/activation_kernels.h"
#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/memory_bandwidth.h"
#include "backend/cpu/quant_dot_kernels.h"
#include "backend/quantize.h"
#include "core/cancel.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace qvl::cpu {
namespace {

constexpr int64_t kRowBlock = 64;  // activation rows a weight slice serves while they stay in cache

// A decode step reads each weight byte once, so each thread reads its rows as kReadStreams runs at once
// (memory_bandwidth.h says why): on the GPU machine's Xeon the q4 decode loop (VNNI) went from 31 to 38 GB/s at 4
// threads and from 101 to 111 at 16, q8's (AVX2) from 30 to 34 and from 63 to 134 (tools/microbench/cpu_quant_dot.cpp,
// one call). Every output element is computed as before: only the order of the rows changes.
//
// Visits [begin, end) in steps of `step` rows as kReadStreams runs kRunBytes apart: the range cut into windows of
// kReadStreams x kRunBytes, a step of each run in turn, then whatever the windows left at the end.
template <typename Visit>
void interleaved(std::size_t begin, std::size_t end, std::size_t step, std::size_t row_bytes, Visit&& visit) {
  const std::size_t part = std::max<std::size_t>(1, kRunBytes / (row_bytes * step)) * step;  // rows of a run
  std::size_t window = begin;
  for (; window + kReadStreams * part <= end; window += kReadStreams * part)
    for (std::size_t i = 0; i < part; i += step)
      for (std::size_t r = 0; r < kReadStreams; ++r) visit(window + r * part + i, window + r * part + i + step);
  if (window < end) visit(window, end);
}

// x as the kernels read it: the f32 rows, and for q8/q4 weights the rows quantised per block of 32 (quantize.h),
// once for every matrix that reads them.
class ProductInput {
public:
  ProductInput(const Tensor& x, bool quantise) : x_(x.data<float>()), k_(last_dim(x)), m_(rows_of(x)) {
    if (!quantise) return;
    const int64_t blocks = activation_blocks(k_);
    q_.resize(std::size_t(m_ * blocks * kQuantBlock));
    scales_.resize(std::size_t(m_ * blocks));
    sums_.resize(std::size_t(m_ * blocks));
    const auto quantize_row = quant_dot_kernels().quantize_row;
    // Across the threads in chunks of 2^16 values (AVX2: 0.42 µs a 2,048 row; a prefill of 64 rows of 6,144 splits
    // six ways, 64 of 2,048 two; a decode row stays on the caller).
    ThreadPool::global().parallel_for(std::size_t(m_), std::max<std::size_t>(1, kMinChunkWork / std::size_t(k_)),
                                      [&](std::size_t begin, std::size_t end) {
                                        for (std::size_t r = begin; r < end; ++r)
                                          quantize_row(x_ + int64_t(r) * k_, k_, q_.data() + int64_t(r) * blocks * kQuantBlock,
                                                       scales_.data() + int64_t(r) * blocks, sums_.data() + int64_t(r) * blocks);
                                      });
  }
  int64_t k() const { return k_; }
  int64_t m() const { return m_; }

  // Output rows [begin, end) of w for every activation row, into y [m, w.rows()], plus the bias (w's, in f32)
  // when there is one.
  void rows(const LinearWeights& w, const std::vector<float>& bias, float* y, std::size_t begin, std::size_t end,
            const std::atomic<bool>* stop) const {
    const int64_t n = w.rows();
    if (w.quantised()) quantised_rows(w, y, begin, end, stop);
    else float_rows(w, y, begin, end, stop);
    if (!bias.empty())
      for (int64_t r = 0; r < m_; ++r)
        for (std::size_t j = begin; j < end; ++j) y[r * n + int64_t(j)] += bias[j];
  }

private:
  void float_rows(const LinearWeights& w, float* y, std::size_t begin, std::size_t end, const std::atomic<bool>* stop) const {
    const auto& kernels = dot_kernels();
    const int64_t n = w.rows();
    const std::size_t row_bytes = std::size_t(format_traits(w.format).row_bytes(k_, 1));
    const auto* wp = static_cast<const char*>(w.weight.raw());
    for (int64_t m0 = 0; m0 < m_; m0 += kRowBlock) {
      if (stop_requested(stop)) return;  // a stopped prefill ends after this block, not the whole product
      const int64_t rows = std::min(kRowBlock, m_ - m0);
      interleaved(begin, end, kDotTileRows, row_bytes, [&](std::size_t from, std::size_t to) {
        for (std::size_t j = from; j < to; j += kDotTileRows)
          kernels.dot_tile(x_ + m0 * k_, std::size_t(rows), std::size_t(k_), wp + j * row_bytes, row_bytes,
                           std::min(kDotTileRows, to - j), w.weight.dtype(), y + m0 * n + int64_t(j), std::size_t(n));
      });
    }
  }

  void quantised_rows(const LinearWeights& w, float* y, std::size_t begin, std::size_t end, const std::atomic<bool>* stop) const {
    const auto& kernels = quant_dot_kernels();
    const auto dot = w.format == WeightFormat::Q8 ? kernels.q8 : kernels.q4;
    const int64_t n = w.rows(), blocks = activation_blocks(k_);
    const auto* values = w.weight.data<uint8_t>();
    const auto* scales = w.scales.data<uint16_t>();
    const std::size_t row_bytes = std::size_t(w.weight.dim(1)), groups = std::size_t(w.scales.dim(1));
    for (int64_t m0 = 0; m0 < m_; m0 += kRowBlock) {
      if (stop_requested(stop)) return;
      interleaved(begin, end, 1, row_bytes, [&](std::size_t from, std::size_t to) {
        for (std::size_t j = from; j < to; ++j)
          dot({.x = q_.data() + m0 * blocks * kQuantBlock,
               .x_scales = scales_.data() + m0 * blocks,
               .x_sums = sums_.data() + m0 * blocks,
               .rows = std::size_t(std::min(kRowBlock, m_ - m0)),
               .blocks = std::size_t(blocks),
               .w = values + j * row_bytes,
               .w_scales = scales + j * groups,
               .group_shift = w.group_shift(),
               .y = y + m0 * n + int64_t(j),
               .y_stride = std::size_t(n)});
      });
    }
  }

  const float* x_;
  int64_t k_, m_;
  std::vector<int8_t> q_;
  std::vector<float> scales_;
  std::vector<int32_t> sums_;
};

std::vector<float> bias_of(const LinearWeights& w) {
  const Tensor* bias = w.bias_or_null();
  return bias ? bias->to_f32_vector() : std::vector<float>{};
}

bool any_quantised(std::span<const ProductOutput> outputs) {
  return std::any_of(outputs.begin(), outputs.end(), [](const ProductOutput& o) { return o.weights->quantised(); });
}

// A chunk worth a thread, in weight rows: at least four (a dot tile), and 2^16 multiply-adds.
std::size_t row_grain(const ProductInput& in) {
  return std::max<std::size_t>(4, kMinChunkWork / std::size_t(std::max<int64_t>(1, in.k() * in.m())));
}

}  // namespace

void products(const Tensor& x, std::span<const ProductOutput> outputs, const std::atomic<bool>* stop) {
  if (rows_of(x) == 0) return;  // (nothing to quantise: the integer loops below would read no rows)
  const ProductInput in(x, any_quantised(outputs));
  std::size_t total = 0;
  std::vector<std::vector<float>> biases;
  for (const ProductOutput& o : outputs) {
    total += std::size_t(o.weights->rows());
    biases.push_back(bias_of(*o.weights));
  }
  // One loop over the matrices' rows one after another: a thread's slice may start in one and end in the next.
  ThreadPool::global().parallel_for(total, row_grain(in), [&](std::size_t begin, std::size_t end) {
    std::size_t first = 0;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const std::size_t n = std::size_t(outputs[i].weights->rows());
      const std::size_t from = std::max(begin, first), to = std::min(end, first + n);
      if (from < to) in.rows(*outputs[i].weights, biases[i], outputs[i].y, from - first, to - first, stop);
      first += n;
    }
  });
}

void swiglu_product(const Tensor& x, const LinearWeights& gate, const LinearWeights& up, float* y, float* up_product,
                    const std::atomic<bool>* stop) {
  if (rows_of(x) == 0) return;
  const ProductInput in(x, gate.quantised() || up.quantised());
  const int64_t n = gate.rows();
  const std::vector<float> gate_bias = bias_of(gate), up_bias = bias_of(up);
  const auto silu_mul = activation_kernels().silu_mul;
  ThreadPool::global().parallel_for(std::size_t(n), row_grain(in), [&](std::size_t begin, std::size_t end) {
    in.rows(gate, gate_bias, y, begin, end, stop);
    in.rows(up, up_bias, up_product, begin, end, stop);
    if (stop_requested(stop)) return;
    for (int64_t r = 0; r < in.m(); ++r) {
      float* row = y + r * n + int64_t(begin);
      silu_mul(row, up_product + r * n + int64_t(begin), row, end - begin);
    }
  });
}

}  // namespace qvl::cpu
