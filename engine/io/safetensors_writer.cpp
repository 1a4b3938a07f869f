#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

namespace qvl {

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path, std::map<std::string, std::string> metadata)
    : path_(std::move(path)), metadata_(std::move(metadata)) {}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::declare(const std::string& name, DType dtype, const Shape& shape) {
  if (out_) fail(path_.string(), ": tensor '", name, "' declared after writing began");
  for (const auto& t : tensors_)
    if (t.name == name) fail(path_.string(), ": tensor '", name, "' declared twice");
  TensorInfo info{name, dtype, shape, offset_, offset_ + uint64_t(shape_numel(shape)) * dtype_size(dtype)};
  offset_ = info.end;
  tensors_.push_back(std::move(info));
}

void SafetensorsWriter::write_header() {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  for (const auto& t : tensors_)
    header[t.name] = {{"dtype", dtype_safetensors_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data region 8-byte aligned, as the reference writer does
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((uint64_t(text.size()) >> (8 * i)) & 0xffu);

  out_ = std::make_unique<AtomicFileWriter>(path_);
  out_->write(len, 8);
  out_->write(text.data(), text.size());
}

void SafetensorsWriter::append(const void* data, std::size_t bytes) {
  if (finished_) fail(path_.string(), ": append after finish");
  if (!out_) write_header();
  if (written_ + bytes > offset_) fail(path_.string(), ": more bytes appended than the declared tensors hold");
  out_->write(data, bytes);
  written_ += bytes;
}

void SafetensorsWriter::finish() {
  if (!out_) write_header();
  if (written_ != offset_) fail(path_.string(), ": ", written_, " bytes written but ", offset_, " declared");
  out_->commit();
  out_.reset();
  finished_ = true;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter writer(path, metadata);
  for (const auto& [name, t] : tensors) writer.declare(name, t.dtype(), t.shape());
  for (const auto& [name, t] : tensors) writer.append(t.raw(), t.nbytes());
  writer.finish();
}

}  // namespace qvl
