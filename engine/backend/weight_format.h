#pragma once
// Weights as units. A linear layer's weights are one LinearWeights: the matrix in its storage *format*, an optional
// bias, and room for the per-block scales a quantised format carries. The format is separate from the element type:
// f32, f16 and bf16 store one element per value; q8 and q4 (next) store blocks of small integers with a scale each.
// What depends on the format on the host (bytes per row, block sizes) is read from one table (weight_format.cpp); on
// the device, kernels/weights.cuh loads and widens every stored type. So a new
// format is a row there plus its kernels (docs/architecture.md lists the places).
#include <cstdint>
#include <string_view>

#include "core/tensor.h"

namespace qvl {

enum class WeightFormat { F32, F16, BF16 };

struct WeightFormatTraits {
  std::string_view name;  // "bf16": reports and the op-cost table
  DType storage;          // element type of the stored matrix tensor
  int64_t block;          // values that share one scale (1: no scales)
  int64_t block_bytes;    // bytes one block of `block` values takes (with its scale, for a quantised format)
  // Bytes one row of k values takes in this format (rounded up to whole blocks): every size is computed per row.
  int64_t row_bytes(int64_t k) const { return (k + block - 1) / block * block_bytes; }
};

const WeightFormatTraits& format_traits(WeightFormat format);
// The format that stores elements of type t as they are (f32, f16, bf16); throws qvl::Error for other types.
WeightFormat format_of(DType t);

// What a weight is for, told to Backend::upload: a backend may store matrices differently from the vectors next to
// them (the SM61 profile keeps everything 16-bit; a quantised format will pack matrices and leave norms alone).
enum class WeightRole { Matrix, Vector, EmbeddingTable };

struct LinearWeights {
  Tensor weight;  // [out, in] (PyTorch layout), stored as `format` says
  Tensor bias;    // [out]; undefined (no data) when the layer has none
  Tensor scales;  // per-block scales of a quantised format; undefined for f32/f16/bf16
  WeightFormat format = WeightFormat::F32;
  int64_t rows() const { return weight.dim(0); }
  int64_t cols() const { return weight.dim(1); }
  const Tensor* bias_or_null() const { return bias.raw() ? &bias : nullptr; }
  // A weight tensor already on a backend, in the format of its element type.
  static LinearWeights of(Tensor weight, Tensor bias = {});
};

struct NormWeights {
  Tensor weight, bias;  // bias only for LayerNorm
};

}  // namespace qvl
