#include "backend/weight_format.h"

#include "core/error.h"

namespace qvl {

namespace {

// One row per format, in enum order.
constexpr WeightFormatTraits kFormats[] = {
    {"f32", DType::F32, 32, false},
    {"f16", DType::F16, 16, false},
    {"bf16", DType::BF16, 16, false},
    // q8: symmetric int8 in [-127, 127] (8.5 bits a value with a scale per 32, what llama.cpp's Q8_0 uses).
    {"q8", DType::I8, 8, true},
    // q4: symmetric 4-bit in [-8, 7] stored + 8 (4.5 bits a value at groups of 32; docs/quantization.md says why).
    {"q4", DType::U8, 4, true},
};

void check_bias(const Tensor& bias, int64_t rows) {
  if (bias.raw() && (bias.rank() != 1 || bias.dim(0) != rows))
    fail("a bias of shape ", shape_to_string(bias.shape()), " for ", rows, " rows of weights");
}

}  // namespace

const WeightFormatTraits& format_traits(WeightFormat format) { return kFormats[int(format)]; }

WeightFormat format_of(DType t) {
  switch (t) {
    case DType::F32: return WeightFormat::F32;
    case DType::F16: return WeightFormat::F16;
    case DType::BF16: return WeightFormat::BF16;
    default: fail("weights of type ", dtype_name(t), " are not supported (f32, f16 and bf16 are)");
  }
}

std::optional<WeightFormat> format_from_name(std::string_view name) {
  for (int f = 0; f < int(std::size(kFormats)); ++f)
    if (kFormats[f].name == name) return WeightFormat(f);
  return std::nullopt;
}

void check_group(WeightFormat format, int64_t group) {
  const WeightFormatTraits& t = format_traits(format);
  if (!t.quantised) {
    if (group != 1) fail("a ", t.name, " weight has no groups (group ", group, ")");
    return;
  }
  if (group < kQuantBlock || group > 1024 || (group & (group - 1)))
    fail("a ", t.name, " group of ", group, " values: groups are powers of two from ", kQuantBlock, " to 1024");
}

int LinearWeights::group_shift() const {
  int shift = 0;
  while ((kQuantBlock << shift) < group) ++shift;
  return shift;
}

LinearWeights LinearWeights::of(Tensor weight, Tensor bias) {
  const WeightFormat f = format_of(weight.dtype());
  const WeightFormatTraits& t = format_traits(f);
  const int64_t in = weight.rank() == 2 ? weight.dim(1) : 0;
  if (weight.rank() != 2 || weight.nbytes() != std::size_t(weight.dim(0) * t.row_bytes(in, 1)))
    fail("a ", t.name, " weight matrix of shape ", shape_to_string(weight.shape()), " holds ", weight.nbytes(),
         " bytes, not rows x ", t.row_bytes(in, 1));
  check_bias(bias, weight.dim(0));
  return {std::move(weight), std::move(bias), {}, f, 1, in};
}

LinearWeights LinearWeights::quantised_of(WeightFormat format, int64_t group, int64_t in, Tensor values, Tensor scales,
                                          Tensor bias) {
  const WeightFormatTraits& t = format_traits(format);
  if (!t.quantised) fail("quantised weights in the ", t.name, " format");
  check_group(format, group);
  if (in <= 0) fail("a ", t.name, " weight with ", in, " input values");
  const int64_t rows = values.rank() == 2 ? values.dim(0) : -1;
  if (values.dtype() != t.storage || rows < 0 || values.dim(1) != t.row_bytes(in, group))
    fail("a ", t.name, " weight for ", in, " inputs in groups of ", group, " is ", dtype_name(t.storage), " [rows, ",
         t.row_bytes(in, group), "], not ", dtype_name(values.dtype()), " ", shape_to_string(values.shape()));
  if (scales.dtype() != DType::F16 || scales.rank() != 2 || scales.dim(0) != rows ||
      scales.dim(1) != t.groups(in, group))
    fail("the scales of a ", t.name, " weight of ", rows, " rows and ", in, " inputs in groups of ", group, " are f16 [",
         rows, ", ", t.groups(in, group), "], not ", dtype_name(scales.dtype()), " ", shape_to_string(scales.shape()));
  check_bias(bias, rows);
  return {std::move(values), std::move(bias), std::move(scales), format, group, in};
}

}  // namespace qvl
