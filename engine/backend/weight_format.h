#pragma once
// Weights as units. A linear layer's weights are one LinearWeights: the matrix in its storage *format*, an optional
// bias, and the per-group scales a quantised format carries. The format is separate from the element type: f32, f16
// and bf16 store one element per value; q8 and q4 store small integers, each group of `group` values along the
// input dimension sharing one f16 scale (value = scale · q). What depends on the format on the host (bytes per row,
// groups) is read from one table (weight_format.cpp); on the device, kernels/weights.cuh loads and widens the float
// types, gemv_quantized.cu and dequantize.cu read the integer ones. A new format is a row there plus its kernels
// (docs/architecture.md lists the places; docs/quantization.md describes q8 and q4 byte by byte).
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/tensor.h"

namespace qvl {

enum class WeightFormat { F32, F16, BF16, Q8, Q4 };

// Quantised formats come in blocks of 32 values: a group (values per scale) is a multiple of it, and activations
// multiplied with quantised weights are quantised per block of 32 too (8-bit, one f32 scale each).
inline constexpr int64_t kQuantBlock = 32;

struct WeightFormatTraits {
  std::string_view name;  // "bf16", "q4": reports, the op-cost table, --weights
  DType storage;          // element type of the stored values tensor (q4: u8, two values a byte)
  int bits;               // bits per value
  bool quantised;         // values come with one f16 scale per group
  // Bytes one row of k values takes in the values tensor: quantised rows are padded with zeros to whole groups.
  int64_t row_bytes(int64_t k, int64_t group) const {
    return quantised ? (k + group - 1) / group * group * bits / 8 : k * bits / 8;
  }
  int64_t groups(int64_t k, int64_t group) const { return quantised ? (k + group - 1) / group : 0; }
};

const WeightFormatTraits& format_traits(WeightFormat format);
// The format that stores elements of type t as they are (f32, f16, bf16); throws qvl::Error for other types.
WeightFormat format_of(DType t);
std::optional<WeightFormat> format_from_name(std::string_view name);
// Throws qvl::Error unless `group` is a valid group size for `format` (a power of two from kQuantBlock to 1024: kernels
// find a block's scale with a shift, not a division).
void check_group(WeightFormat format, int64_t group);

// What a weight is for, told to Backend::upload: a backend may store matrices differently from the vectors next to
// them (the SM61 profile keeps floats 16-bit; quantised values and their scales pass as they are).
enum class WeightRole { Matrix, Vector, EmbeddingTable };

struct LinearWeights {
  // [out, in] (PyTorch layout) for f32/f16/bf16; [out, row_bytes] i8 (q8) or u8 (q4) for the quantised formats.
  Tensor weight;
  Tensor bias;    // [out]; undefined (no data) when the layer has none
  Tensor scales;  // [out, groups] f16 for the quantised formats; undefined for f32/f16/bf16
  WeightFormat format = WeightFormat::F32;
  int64_t group = 1;  // values per scale
  int64_t in = 0;     // the input width (a quantised row is padded past it)
  // The CPU backend's q8 values and scales in tiles of 16 rows (backend/cpu/q8_tiles.h), not row by row: the same
  // shapes and bytes, another order. Set only by that backend's upload, on processors with AVX-512 VNNI.
  bool tiled = false;
  int64_t rows() const { return weight.dim(0); }
  int64_t cols() const { return in; }
  bool quantised() const { return format_traits(format).quantised; }
  int group_shift() const;  // log2 of the 32-value blocks a group holds: block b's scale is scales[b >> group_shift]
  const Tensor* bias_or_null() const { return bias.raw() ? &bias : nullptr; }
  std::size_t nbytes() const { return weight.nbytes() + scales.nbytes() + bias.nbytes(); }
  // A float weight tensor (host or backend), in the format of its element type.
  static LinearWeights of(Tensor weight, Tensor bias = {});
  // Quantised values and scales for `in` input values (shapes checked against the format).
  static LinearWeights quantised_of(WeightFormat format, int64_t group, int64_t in, Tensor values, Tensor scales,
                                    Tensor bias = {});
};

struct NormWeights {
  Tensor weight, bias;  // bias only for LayerNorm
};

}  // namespace qvl
