#pragma once
// Typed access to fields of a JSON config with errors that name the file and the field path:
//   "config.json: text_config.num_attention_heads: expected an integer, got string".
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/limits.h"
#include "core/error.h"

namespace qvl {

// Throws qvl::Error naming the path when it is not a regular file, is larger than `max_bytes` (checked before
// reading: issue 21 saw a 200 MB file of [] take 4.7 GB to parse), or is not JSON. The default suits a
// tokenizer.json or a messages file; configs pass limits::kConfigFileBytes.
nlohmann::json read_json_file(const std::filesystem::path& path, std::uintmax_t max_bytes = limits::kJsonFileBytes);

class JsonFields {
public:
  JsonFields(const nlohmann::json& object, std::string file, std::string prefix = "");

  bool has(const std::string& key) const;
  JsonFields object(const std::string& key) const;  // required nested object

  template <typename T> T required(const std::string& key) const {
    if (!has(key)) fail(where(key), ": required field is missing");
    return convert<T>(object_.at(key), key);
  }
  template <typename T> T optional(const std::string& key, T fallback) const {
    return has(key) ? convert<T>(object_.at(key), key) : fallback;
  }
  template <typename T> std::optional<T> maybe(const std::string& key) const {
    return has(key) ? std::optional<T>(convert<T>(object_.at(key), key)) : std::nullopt;
  }
  // The full path of a field, for errors raised by callers ("config.json: text_config.head_dim").
  std::string where(const std::string& key) const;
  const nlohmann::json& json() const { return object_; }

private:
  template <typename T> T convert(const nlohmann::json& v, const std::string& key) const;
  const nlohmann::json& object_;
  std::string file_, prefix_;
};

// The supported field types (defined in json_fields.cpp).
template <> int64_t JsonFields::convert<int64_t>(const nlohmann::json&, const std::string&) const;
template <> double JsonFields::convert<double>(const nlohmann::json&, const std::string&) const;
template <> bool JsonFields::convert<bool>(const nlohmann::json&, const std::string&) const;
template <> std::string JsonFields::convert<std::string>(const nlohmann::json&, const std::string&) const;
template <> std::vector<int64_t> JsonFields::convert<std::vector<int64_t>>(const nlohmann::json&, const std::string&) const;
template <> std::vector<double> JsonFields::convert<std::vector<double>>(const nlohmann::json&, const std::string&) const;

}  // namespace qvl
