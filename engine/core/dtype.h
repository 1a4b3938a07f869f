#pragma once
// Element types. The model computes in f32/f16/bf16; the integer and f64 types exist so that a safetensors file
// holding them is read and reported correctly rather than rejected as corrupt.
#include <cstddef>
#include <optional>
#include <string_view>

namespace qvl {

enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool };

std::size_t dtype_size(DType t);
bool is_floating(DType t);
// Spelling used by safetensors headers ("F32", "BF16", ...).
std::string_view dtype_safetensors_name(DType t);
std::optional<DType> dtype_from_safetensors_name(std::string_view name);
// Spelling used on the command line and in config files ("f32", "bf16", ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace qvl
