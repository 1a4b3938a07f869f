#include "backend/weight_format.h"

#include "core/error.h"

namespace qvl {

namespace {

// One row per format, in enum order.
constexpr WeightFormatTraits kFormats[] = {
    {"f32", DType::F32, 1, 4},
    {"f16", DType::F16, 1, 2},
    {"bf16", DType::BF16, 1, 2},
};

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

LinearWeights LinearWeights::of(Tensor weight, Tensor bias) {
  const WeightFormat f = format_of(weight.dtype());
  const WeightFormatTraits& t = format_traits(f);
  if (weight.rank() != 2 || weight.nbytes() != std::size_t(weight.dim(0) * t.row_bytes(weight.dim(1))))
    fail("a ", t.name, " weight matrix of shape ", shape_to_string(weight.shape()), " holds ", weight.nbytes(),
         " bytes, not rows x ", t.row_bytes(weight.rank() == 2 ? weight.dim(1) : 0));
  if (bias.raw() && (bias.rank() != 1 || bias.dim(0) != weight.dim(0)))
    fail("a bias of shape ", shape_to_string(bias.shape()), " for ", weight.dim(0), " rows of weights");
  return {std::move(weight), std::move(bias), {}, f};
}

}  // namespace qvl
