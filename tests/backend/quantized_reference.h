#pragma once
// The reference the CPU's integer products are held to (quantize_test.cpp, q8_tiles_test.cpp): the dequantised
// weights times the dequantised activations, summed in double.
#include <cstdint>
#include <vector>

#include "backend/quantize.h"
#include "core/tensor.h"

namespace qvl::test {

// x's rows quantised per block as the products quantise them, with each block's sum (q4's offset, q8 tiles' +128).
struct QuantizedActivations {
  int64_t blocks = 0;  // a row
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};
inline QuantizedActivations quantized_activations(const Tensor& x) {
  const int64_t m = x.dim(0), k = x.dim(1), blocks = activation_blocks(k);
  QuantizedActivations a{blocks, std::vector<int8_t>(std::size_t(m * blocks * kQuantBlock)),
                         std::vector<float>(std::size_t(m * blocks)), std::vector<int32_t>(std::size_t(m * blocks))};
  for (int64_t r = 0; r < m; ++r)
    quantize_activation_row(x.data<float>() + r * k, k, a.q.data() + r * blocks * kQuantBlock, a.scales.data() + r * blocks,
                            a.sums.data() + r * blocks);
  return a;
}

inline std::vector<double> quantized_reference(const Tensor& x, const LinearWeights& w) {
  const int64_t m = x.dim(0), k = x.dim(1), blocks = activation_blocks(k);
  const Tensor wd = dequantize_matrix(w);
  std::vector<double> y(std::size_t(m * w.rows()));
  std::vector<int8_t> q(std::size_t(blocks * kQuantBlock));
  std::vector<float> s(static_cast<std::size_t>(blocks));
  for (int64_t r = 0; r < m; ++r) {
    quantize_activation_row(x.data<float>() + r * k, k, q.data(), s.data());
    for (int64_t j = 0; j < w.rows(); ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i)
        acc += double(wd.data<float>()[j * k + i]) * double(s[std::size_t(i / kQuantBlock)]) * double(q[std::size_t(i)]);
      y[std::size_t(r * w.rows() + j)] = acc;
    }
  }
  return y;
}

}  // namespace qvl::test
