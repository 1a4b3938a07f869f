#pragma once
// All the tensors of a model folder: one `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` (whose weight_map names the file of every tensor).
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace qvl {

class Checkpoint {
public:
  // `location` is a model folder or a single .safetensors file.
  static Checkpoint open(const std::filesystem::path& location);

  struct Entry {
    const TensorInfo* info;
    const SafetensorsFile* file;
  };
  const Entry* find(std::string_view name) const;
  Tensor tensor(std::string_view name) const;
  // Every tensor, sorted by name.
  const std::vector<std::pair<std::string, Entry>>& entries() const { return entries_; }
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
  uint64_t total_bytes() const;
  // Throws qvl::Error naming the first file truncated or rewritten in place since it was opened.
  void check_unchanged() const {
    for (const auto& file : files_) file->check_unchanged();
  }

private:
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::vector<std::pair<std::string, Entry>> entries_;
};

}  // namespace qvl
