// Conversions against PyTorch's own results (tests/golden/dtype, made by tools/reference/make_dtype_goldens.py)
// and against invariants that hold for every one of the 65536 half-precision values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "test_support.h"

namespace qvl {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }
bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

TEST(DType, ConversionsMatchPyTorchBitForBit) {
  const auto golden = nlohmann::json::parse(test::read_bytes(std::string(QVL_TEST_GOLDEN_DIR) + "/dtype/conversions.json"));
  ASSERT_GT(golden["cases"].size(), 1000u);
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const float f = from_bits(c[0].get<uint32_t>());
    const auto bf16 = c[1].get<uint16_t>(), f16 = c[2].get<uint16_t>();
    if (std::isnan(f)) {  // NaN payloads are not specified; NaN must stay NaN
      EXPECT_TRUE(bf16_is_nan(f32_to_bf16(f)));
      EXPECT_TRUE(f16_is_nan(f32_to_f16(f)));
      continue;
    }
    EXPECT_EQ(f32_to_bf16(f), bf16) << "f32 bits 0x" << std::hex << c[0].get<uint32_t>();
    EXPECT_EQ(f32_to_f16(f), f16) << "f32 bits 0x" << std::hex << c[0].get<uint32_t>();
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(DType, EveryHalfValueRoundTripsThroughF32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto v = uint16_t(h);
    if (f16_is_nan(v)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(v)));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f16_to_f32(v)), v) << "f16 0x" << std::hex << h;
    if (!bf16_is_nan(v)) {
      ASSERT_EQ(f32_to_bf16(bf16_to_f32(v)), v) << "bf16 0x" << std::hex << h;
    }
  }
}

TEST(DType, HalfDecodingIsExact) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc2f7), -123.5f);
}

TEST(DType, TensorConversionRoundsLikeScalarCode) {
  Tensor t = Tensor::empty(DType::F32, {2, 3});
  const float values[] = {1.0f, -2.5f, 3.14159f, 1e-6f, 70000.0f, -0.0f};
  std::memcpy(t.raw(), values, sizeof values);
  const Tensor h = t.to(DType::F16), b = t.to(DType::BF16);
  EXPECT_EQ(h.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(h.data<uint16_t>()[i], f32_to_f16(values[i]));
    EXPECT_EQ(b.data<uint16_t>()[i], f32_to_bf16(values[i]));
  }
  EXPECT_TRUE(std::isinf(h.to_f32_vector()[4]));  // 70000 overflows f16
  EXPECT_EQ(b.to(DType::F32).to_f32_vector()[2], bf16_to_f32(f32_to_bf16(3.14159f)));
}

// The tensors' widening to f32 (a loop of its own for f16 and bf16) gives every one of the 65,536 bit patterns as
// the scalar conversions do, subnormals, infinities and NaNs included (compared as bits).
TEST(DType, EveryHalfAndBfloatWidensAsTheScalarConversion) {
  for (const DType type : {DType::F16, DType::BF16}) {
    Tensor t = Tensor::empty(type, {65536});
    for (uint32_t i = 0; i < 65536; ++i) t.data<uint16_t>()[i] = uint16_t(i);
    const std::vector<float> wide = t.to_f32_vector();
    for (uint32_t i = 0; i < 65536; ++i) {
      const float expected = type == DType::F16 ? f16_to_f32(uint16_t(i)) : bf16_to_f32(uint16_t(i));
      ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), std::bit_cast<uint32_t>(expected)) << dtype_name(type) << " bits " << i;
    }
  }
  // A tensor borrowed from a checkpoint may start at an odd byte: the widening reads it byte-wise.
  auto bytes = std::make_shared<std::vector<uint8_t>>(7);
  const uint16_t bits[3] = {0x3f80, 0xc2f7, 0x0001};  // bf16: 1, -123.5, the smallest subnormal
  std::memcpy(bytes->data() + 1, bits, sizeof bits);
  const Tensor odd = Tensor::borrow(DType::BF16, {3}, bytes->data() + 1, bytes);
  EXPECT_EQ(odd.to_f32_vector(), (std::vector<float>{1.0f, -123.5f, bf16_to_f32(0x0001)}));
}

TEST(DType, ShapesRejectNegativeAndOverflowingSizes) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 0, 5}), 0);
  EXPECT_THROW(shape_numel({2, -1}), Error);
  EXPECT_THROW(shape_numel({int64_t(1) << 40, int64_t(1) << 40}), Error);
  EXPECT_THROW(Tensor::empty(DType::F32, {4}).reshaped({3}), Error);
}

// A tensor's bytes seen as another type share its storage; a view past its end or off the type's alignment fails.
TEST(DType, ReinterpretedViewsShareStorageWithinBounds) {
  Tensor buffer = Tensor::zeros(DType::I64, {6});  // 48 bytes: an index, a slot, then 8 floats
  Tensor floats = buffer.reinterpreted(DType::F32, {2, 4}, 16);
  floats.data<float>()[5] = 1.5f;
  float back;
  std::memcpy(&back, reinterpret_cast<const char*>(buffer.data<int64_t>()) + 16 + 5 * sizeof(float), sizeof back);
  EXPECT_EQ(back, 1.5f);
  EXPECT_EQ(floats.numel(), 8);
  EXPECT_THROW(buffer.reinterpreted(DType::F32, {2, 4}, 20), Error);  // one float past the end
  EXPECT_THROW(buffer.reinterpreted(DType::F32, {1}, 2), Error);      // not on a float's boundary
  EXPECT_THROW(buffer.reinterpreted(DType::I64, {1}, 64), Error);     // past the end altogether
  EXPECT_THROW(buffer.reinterpreted(DType::I64, {int64_t(1) << 61}, 0), Error);  // 2^64 bytes: no wrap to 0
}

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32, DType::I16, DType::I8,
                  DType::U8, DType::Bool}) {
    EXPECT_EQ(dtype_from_safetensors_name(dtype_safetensors_name(t)), t);
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_FALSE(dtype_from_safetensors_name("F8_E4M3").has_value());
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
}

}  // namespace
}  // namespace qvl
