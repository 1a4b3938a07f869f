#include "io/checkpoint.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/limits.h"
#include "core/error.h"
#include "io/json_fields.h"

namespace qvl {
namespace fs = std::filesystem;

Checkpoint Checkpoint::open(const fs::path& location) {
  Checkpoint ck;
  std::map<std::string, Entry, std::less<>> by_name;
  auto add_file = [&](const fs::path& path) -> const SafetensorsFile* {
    ck.files_.push_back(SafetensorsFile::open(path));
    return ck.files_.back().get();
  };

  const fs::path index_path = location / "model.safetensors.index.json";
  if (fs::is_regular_file(location)) {
    const auto* file = add_file(location);
    for (const auto& t : file->tensors()) by_name.emplace(t.name, Entry{&t, file});
  } else if (fs::exists(index_path)) {
    const nlohmann::json index = read_json_file(index_path, limits::kIndexFileBytes);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(index_path.string(), ": missing object 'weight_map'");
    std::map<std::string, const SafetensorsFile*> shards;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) fail(index_path.string(), ": weight_map['", name, "'] is not a file name");
      const std::string shard_name = shard.get<std::string>();
      if (shard_name.find('/') != std::string::npos || shard_name.find("..") != std::string::npos)
        fail(index_path.string(), ": weight_map['", name, "'] names '", shard_name, "', outside the model folder");
      auto it = shards.find(shard_name);
      if (it == shards.end()) it = shards.emplace(shard_name, add_file(location / shard_name)).first;
      const TensorInfo* info = it->second->find(name);
      if (!info) fail(index_path.string(), ": tensor '", name, "' is mapped to ", shard_name, ", which does not hold it");
      by_name.emplace(name, Entry{info, it->second});
    }
    for (const auto& [shard_name, file] : shards)
      for (const auto& t : file->tensors())
        if (!by_name.contains(t.name))
          fail(index_path.string(), ": tensor '", t.name, "' in ", shard_name, " is missing from weight_map");
  } else if (fs::exists(location / "model.safetensors")) {
    const auto* file = add_file(location / "model.safetensors");
    for (const auto& t : file->tensors()) by_name.emplace(t.name, Entry{&t, file});
  } else {
    fail(location.string(), ": no model.safetensors or model.safetensors.index.json in this folder");
  }
  ck.entries_.assign(by_name.begin(), by_name.end());
  return ck;
}

const Checkpoint::Entry* Checkpoint::find(std::string_view name) const {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const auto& e, std::string_view n) { return e.first < n; });
  return it != entries_.end() && it->first == name ? &it->second : nullptr;
}

Tensor Checkpoint::tensor(std::string_view name) const {
  const Entry* e = find(name);
  if (!e) fail("checkpoint has no tensor named '", name, "'");
  return e->file->tensor(name);
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, e] : entries_) total += e.info->end - e.info->begin;
  return total;
}

}  // namespace qvl
