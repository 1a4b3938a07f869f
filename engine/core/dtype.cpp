#include "core/dtype.h"

#include <array>

namespace qvl {
namespace {
struct DTypeInfo {
  DType type;
  std::size_t size;
  bool floating;
  std::string_view safetensors_name;
  std::string_view name;
};
constexpr std::array<DTypeInfo, 10> kInfo{{
    {DType::F32, 4, true, "F32", "f32"},
    {DType::F16, 2, true, "F16", "f16"},
    {DType::BF16, 2, true, "BF16", "bf16"},
    {DType::F64, 8, true, "F64", "f64"},
    {DType::I64, 8, false, "I64", "i64"},
    {DType::I32, 4, false, "I32", "i32"},
    {DType::I16, 2, false, "I16", "i16"},
    {DType::I8, 1, false, "I8", "i8"},
    {DType::U8, 1, false, "U8", "u8"},
    {DType::Bool, 1, false, "BOOL", "bool"},
}};
const DTypeInfo& info(DType t) { return kInfo[static_cast<std::size_t>(t)]; }
}  // namespace

std::size_t dtype_size(DType t) { return info(t).size; }
bool is_floating(DType t) { return info(t).floating; }
std::string_view dtype_safetensors_name(DType t) { return info(t).safetensors_name; }
std::string_view dtype_name(DType t) { return info(t).name; }

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.safetensors_name == name) return i.type;
  return std::nullopt;
}
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

}  // namespace qvl
