#include "backend/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace qvl {

namespace {

// The f16 scale of one group, checked: a scale past the f16 range (q8 values beyond ~8.3e6, q4 beyond ~5.2e5)
// cannot be stored.
uint16_t group_scale(float scale, std::string_view name, int64_t row, int64_t col) {
  const uint16_t h = f32_to_f16(scale);
  if (std::isinf(f16_to_f32(h)))
    fail("weight ", name, ": the values at row ", row, " from column ", col, " reach ", scale,
         " times the largest integer, past what an f16 scale holds (65504)");
  return h;
}

void quantize_row(const float* x, int64_t in, WeightFormat format, int64_t group, std::string_view name, int64_t row,
                  uint8_t* values, uint16_t* scales) {
  const int64_t groups = format_traits(format).groups(in, group);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * group, end = std::min(in, begin + group);
    float largest = 0, amax = 0;  // the value of largest magnitude, and its magnitude
    for (int64_t i = begin; i < end; ++i) {
      if (!std::isfinite(x[i])) fail("weight ", name, " holds ", x[i], " at row ", row, ", column ", i, ": it cannot be quantised");
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), largest = x[i];
    }
    if (format == WeightFormat::Q8) {
      const uint16_t s = group_scale(amax / 127.0f, name, row, begin);
      const float d = f16_to_f32(s), inv = d > 0 ? 1.0f / d : 0.0f;
      scales[g] = s;
      auto* q = reinterpret_cast<int8_t*>(values) + begin;
      for (int64_t i = 0; i < group; ++i)
        q[i] = begin + i < end ? int8_t(std::clamp(std::nearbyint(x[begin + i] * inv), -127.0f, 127.0f)) : 0;
    } else {  // q4: byte j of each 32-value block holds values j (low nibble) and j + 16 (high nibble), each q + 8
      const uint16_t s = group_scale(largest / -8.0f, name, row, begin);
      const float d = f16_to_f32(s), inv = d != 0 ? 1.0f / d : 0.0f;
      scales[g] = s;
      const auto q4 = [&](int64_t i) {
        return i < end ? uint8_t(std::clamp(std::nearbyint(x[i] * inv), -8.0f, 7.0f) + 8.0f) : uint8_t(8);
      };
      for (int64_t b = begin; b < begin + group; b += kQuantBlock)
        for (int64_t j = 0; j < kQuantBlock / 2; ++j)
          values[b / 2 + j] = uint8_t(q4(b + j) | q4(b + j + kQuantBlock / 2) << 4);
    }
  }
}

}  // namespace

LinearWeights quantize_matrix(const Tensor& matrix, WeightFormat format, int64_t group, std::string_view name) {
  const WeightFormatTraits& t = format_traits(format);
  if (!t.quantised) fail("weight ", name, ": ", t.name, " is not a quantised format");
  check_group(format, group);
  if (matrix.rank() != 2 || !is_floating(matrix.dtype()) || matrix.dtype() == DType::F64 ||
      matrix.device() != Device::CPU)
    fail("weight ", name, ": only f32, f16 and bf16 matrices on the host are quantised, not ",
         dtype_name(matrix.dtype()), " ", shape_to_string(matrix.shape()));
  const int64_t rows = matrix.dim(0), in = matrix.dim(1), row_bytes = t.row_bytes(in, group);
  Tensor values = Tensor::zeros(t.storage, {rows, row_bytes});
  Tensor scales = Tensor::empty(DType::F16, {rows, t.groups(in, group)});
  const auto* src = static_cast<const char*>(matrix.raw());
  const std::size_t src_row = std::size_t(in) * dtype_size(matrix.dtype());
  ThreadPool::global().parallel_for(std::size_t(rows), std::max<int64_t>(1, 65536 / std::max<int64_t>(1, in)),
                                    [&](std::size_t begin, std::size_t end) {
    std::vector<float> row(static_cast<std::size_t>(in));
    for (std::size_t r = begin; r < end; ++r) {
      convert_elements(matrix.dtype(), src + r * src_row, DType::F32, row.data(), std::size_t(in));
      quantize_row(row.data(), in, format, group, name, int64_t(r), values.data<uint8_t>() + r * std::size_t(row_bytes),
                   scales.data<uint16_t>() + r * std::size_t(scales.dim(1)));
    }
  });
  return LinearWeights::quantised_of(format, group, in, std::move(values), std::move(scales));
}

void dequantize_row(const LinearWeights& w, int64_t r, float* out) {
  const WeightFormatTraits& t = format_traits(w.format);
  if (!t.quantised || w.weight.device() != Device::CPU) fail("dequantize: a host q8/q4 matrix, not ", t.name);
  if (w.tiled) fail("dequantize: a matrix in rows, not the CPU backend's tiles (cpu/q8_tiles.h)");
  const auto* values = w.weight.data<uint8_t>() + r * w.weight.dim(1);
  const uint16_t* scales = w.scales.data<uint16_t>() + r * w.scales.dim(1);
  for (int64_t i = 0; i < w.in; ++i) {
    const float d = f16_to_f32(scales[i / w.group]);
    if (w.format == WeightFormat::Q8) {
      out[i] = d * float(int8_t(values[i]));
    } else {
      const int64_t b = i / kQuantBlock * kQuantBlock, j = i - b;
      const uint8_t byte = values[b / 2 + j % (kQuantBlock / 2)];
      out[i] = d * float(int(j < kQuantBlock / 2 ? byte & 15 : byte >> 4) - 8);
    }
  }
}

Tensor dequantize_matrix(const LinearWeights& w, DType type) {
  if (type != DType::F32 && type != DType::BF16) fail("dequantize: to f32 or bf16, not ", dtype_name(type));
  Tensor out = Tensor::empty(type, {w.rows(), w.in});
  ThreadPool::global().parallel_for(std::size_t(w.rows()), 64, [&](std::size_t begin, std::size_t end) {
    std::vector<float> row(std::size_t(w.in));
    for (std::size_t r = begin; r < end; ++r) {
      dequantize_row(w, int64_t(r), row.data());
      convert_elements(DType::F32, row.data(), type,
                       static_cast<char*>(out.raw()) + r * std::size_t(w.in) * dtype_size(type), std::size_t(w.in));
    }
  });
  return out;
}

int64_t activation_blocks(int64_t k) { return (k + kQuantBlock - 1) / kQuantBlock; }

void quantize_activation_row(const float* x, int64_t k, int8_t* q, float* scales, int32_t* sums) {
  for (int64_t b = 0; b < activation_blocks(k); ++b) {
    const int64_t begin = b * kQuantBlock, end = std::min(k, begin + kQuantBlock);
    float amax = 0;
    bool finite = true;  // a NaN or infinite value makes the block's products NaN
    for (int64_t i = begin; i < end; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    scales[b] = finite ? amax / 127.0f : NAN;
    // A block whose 127 / max is past the f32 range (max below ~3.7e-37) quantises to zeros, as zeros do.
    const float inv = finite && amax > 0 && std::isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int64_t i = begin; i < begin + kQuantBlock; ++i) {
      q[i] = finite && i < end ? int8_t(std::nearbyint(x[i] * inv)) : int8_t(0);
      sum += q[i];
    }
    if (sums) sums[b] = sum;
  }
}

}  // namespace qvl
