#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace qvl {
namespace {

using nlohmann::json;

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint64_t(p[i]);
  return v;
}

// The first top-level name that appears twice, found by one SAX pass that keeps nothing but the names: linear in
// the header's size. (nlohmann's parser callback, used before, rescans the parent container each time a value
// closes: issue 21 measured 24 s for a 900 KB header of {"a":[{},{},...]}.)
class DuplicateTopLevelName final : public nlohmann::json_sax<json> {
public:
  std::string duplicate;
  bool valid = true;
  bool key(string_t& name) override {
    if (depth_ == 1 && !seen_.insert(name).second && duplicate.empty()) duplicate = name;
    return true;
  }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    valid = false;  // the full parse below reports it
    return false;
  }

private:
  int depth_ = 0;
  std::set<std::string> seen_;
};

// Parses the header JSON, rejecting duplicate top-level names (plain nlohmann parsing would keep the last one).
json parse_header(std::string_view text, const std::string& where) {
  DuplicateTopLevelName names;
  json::sax_parse(text.begin(), text.end(), &names);
  if (names.valid && !names.duplicate.empty())
    fail(where, ": tensor '", names.duplicate, "' appears twice in the header");
  json header;
  try {
    header = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(where, ": header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) fail(where, ": header is not a JSON object");
  return header;
}

uint64_t as_u64(const json& v, const std::string& where, const char* field) {
  if (!v.is_number_unsigned()) fail(where, ": '", field, "' must hold non-negative integers");
  return v.get<uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const json& entry, const std::string& file) {
  const std::string where = file + ": tensor '" + name + "'";
  if (!entry.is_object()) fail(where, ": entry is not an object");
  TensorInfo info;
  info.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) fail(where, ": missing string field 'dtype'");
  const auto dtype = dtype_from_safetensors_name(dtype_it->get<std::string>());
  if (!dtype) fail(where, ": unsupported dtype '", dtype_it->get<std::string>(), "'");
  info.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) fail(where, ": missing array field 'shape'");
  for (const auto& d : *shape_it) {
    const uint64_t dim = as_u64(d, where, "shape");
    if (dim > uint64_t(std::numeric_limits<int64_t>::max())) fail(where, ": dimension too large");
    info.shape.push_back(int64_t(dim));
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2)
    fail(where, ": 'data_offsets' must be an array of two integers");
  info.begin = as_u64((*offsets_it)[0], where, "data_offsets");
  info.end = as_u64((*offsets_it)[1], where, "data_offsets");
  if (info.end < info.begin) fail(where, ": data_offsets end before they begin");

  int64_t numel = 0;
  try {
    numel = shape_numel(info.shape);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  const uint64_t size = dtype_size(info.dtype);
  if (uint64_t(numel) > std::numeric_limits<uint64_t>::max() / size || uint64_t(numel) * size != info.end - info.begin)
    fail(where, ": shape ", shape_to_string(info.shape), " of ", dtype_safetensors_name(info.dtype), " needs ",
         uint64_t(numel) * size, " bytes but data_offsets span ", info.end - info.begin);
  return info;
}

}  // namespace

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  auto result = std::shared_ptr<SafetensorsFile>(new SafetensorsFile);
  result->file_ = MappedFile::open(path);
  const std::string where = path.string();
  const auto bytes = result->file_->bytes();
  if (bytes.size() < 8) fail(where, ": only ", bytes.size(), " bytes, too small to be a safetensors file");

  const uint64_t header_len = read_u64_le(bytes.data());
  if (header_len > kMaxHeaderBytes) fail(where, ": header length ", header_len, " exceeds the ", kMaxHeaderBytes, " byte limit");
  if (header_len > bytes.size() - 8)
    fail(where, ": header length ", header_len, " runs past the end of the file (", bytes.size(), " bytes): truncated?");
  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  const json header = parse_header(header_text, where);

  result->data_start_ = 8 + header_len;
  const uint64_t data_size = bytes.size() - result->data_start_;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(where, ": '__metadata__' is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(where, ": __metadata__ value for '", key, "' is not a string");
        result->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    result->tensors_.push_back(parse_entry(name, entry, where));
  }

  // The tensors must tile [0, data_size) exactly: sorted by offset, each begins where the previous one ended.
  std::sort(result->tensors_.begin(), result->tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : result->tensors_) {
    if (t.end > data_size)
      fail(where, ": tensor '", t.name, "' ends at byte ", t.end, " but the data region has only ", data_size,
           " bytes: truncated?");
    if (t.begin < expected)
      fail(where, ": tensor '", t.name, "' overlaps tensor '", previous ? previous->name : "", "'");
    if (t.begin > expected)
      fail(where, ": ", t.begin - expected, " bytes before tensor '", t.name, "' belong to no tensor");
    expected = t.end;
    previous = &t;
  }
  if (expected != data_size)
    fail(where, ": the header describes ", expected, " data bytes but the file holds ", data_size);

  for (std::size_t i = 0; i < result->tensors_.size(); ++i) result->index_.emplace(result->tensors_[i].name, i);
  return result;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (!info) fail(path().string(), ": no tensor named '", name, "'");
  auto* data = const_cast<std::byte*>(file_->bytes().data() + data_start_ + info->begin);
  return Tensor::borrow(info->dtype, info->shape, data, file_);
}

}  // namespace qvl
