#pragma once
// The safetensors format: u64 little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
// then the tensor bytes. The reader validates everything before any tensor is touched (the header is untrusted
// input): lengths, JSON, dtypes, shapes, that offsets agree with shapes, and that the tensors tile the data
// region exactly (no overlaps, no holes), as the reference implementation requires.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/limits.h"
#include "core/tensor.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace qvl {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data region
  uint64_t end = 0;
};

class SafetensorsFile {
public:
  static constexpr uint64_t kMaxHeaderBytes = limits::kSafetensorsHeaderBytes;

  // Throws qvl::Error naming the file (and tensor) for any malformed, truncated or hostile content.
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_->path(); }
  void check_unchanged() const { file_->check_unchanged(); }  // MappedFile::check_unchanged
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const TensorInfo* find(std::string_view name) const;
  // A zero-copy view of the tensor's bytes; the tensor keeps the mapping alive.
  Tensor tensor(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
  std::shared_ptr<const MappedFile> file_;
  std::size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Streams a safetensors file: declare every tensor, then append their bytes in declaration order. The file
// appears under its final name only after finish() (an AtomicFileWriter: a full disk leaves nothing behind).
class SafetensorsWriter {
public:
  SafetensorsWriter(std::filesystem::path path, std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void declare(const std::string& name, DType dtype, const Shape& shape);
  // Appends bytes of the current tensor; may be called several times per tensor.
  void append(const void* data, std::size_t bytes);
  void finish();
  uint64_t data_bytes() const { return offset_; }

private:
  void write_header();
  std::filesystem::path path_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  uint64_t offset_ = 0;   // total declared bytes
  uint64_t written_ = 0;  // bytes appended so far
  std::unique_ptr<AtomicFileWriter> out_;  // from the header on
  bool finished_ = false;
};

// Writes whole tensors in one call (tests, small files).
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace qvl
