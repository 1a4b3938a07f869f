#include "io/json_fields.h"

#include <cmath>
#include <limits>

#include "io/mapped_file.h"

namespace qvl {

nlohmann::json read_json_file(const std::filesystem::path& path, std::uintmax_t max_bytes) {
  const std::string text = read_whole_file(path, max_bytes, "this JSON file");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), ": not valid JSON (", e.what(), ")");
  }
}

JsonFields::JsonFields(const nlohmann::json& object, std::string file, std::string prefix)
    : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {
  if (!object_.is_object()) fail(file_, prefix_.empty() ? "" : ": " + prefix_, ": expected a JSON object");
}

bool JsonFields::has(const std::string& key) const {
  const auto it = object_.find(key);
  return it != object_.end() && !it->is_null();
}

std::string JsonFields::where(const std::string& key) const { return file_ + ": " + prefix_ + key; }

JsonFields JsonFields::object(const std::string& key) const {
  if (!has(key)) fail(where(key), ": required object is missing");
  const auto& v = object_.at(key);
  if (!v.is_object()) fail(where(key), ": expected an object, got ", v.type_name());
  return JsonFields(v, file_, prefix_ + key + ".");
}

template <> int64_t JsonFields::convert<int64_t>(const nlohmann::json& v, const std::string& key) const {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    fail(where(key), ": ", v.get<uint64_t>(), " is too large for an integer here");
  if (v.is_number_integer()) return v.get<int64_t>();
  // Some writers emit 2048.0; accept a float only when it is integral and in range (the fuzzer's 1e122 was cast
  // unchecked, undefined behaviour).
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 && std::trunc(d) == d) return int64_t(d);
    fail(where(key), ": expected an integer, got ", d);
  }
  fail(where(key), ": expected an integer, got ", v.type_name());
}
template <> double JsonFields::convert<double>(const nlohmann::json& v, const std::string& key) const {
  if (!v.is_number()) fail(where(key), ": expected a number, got ", v.type_name());
  return v.get<double>();
}
template <> bool JsonFields::convert<bool>(const nlohmann::json& v, const std::string& key) const {
  if (!v.is_boolean()) fail(where(key), ": expected true or false, got ", v.type_name());
  return v.get<bool>();
}
template <> std::string JsonFields::convert<std::string>(const nlohmann::json& v, const std::string& key) const {
  if (!v.is_string()) fail(where(key), ": expected a string, got ", v.type_name());
  return v.get<std::string>();
}
template <>
std::vector<int64_t> JsonFields::convert<std::vector<int64_t>>(const nlohmann::json& v, const std::string& key) const {
  // A single integer is accepted where a list is expected (eos_token_id is written both ways).
  if (v.is_number()) return {convert<int64_t>(v, key)};
  if (!v.is_array()) fail(where(key), ": expected a list of integers, got ", v.type_name());
  std::vector<int64_t> out;
  for (const auto& x : v) out.push_back(convert<int64_t>(x, key));
  return out;
}
template <>
std::vector<double> JsonFields::convert<std::vector<double>>(const nlohmann::json& v, const std::string& key) const {
  if (v.is_number()) return {convert<double>(v, key)};
  if (!v.is_array()) fail(where(key), ": expected a list of numbers, got ", v.type_name());
  std::vector<double> out;
  for (const auto& x : v) out.push_back(convert<double>(x, key));
  return out;
}

}  // namespace qvl
