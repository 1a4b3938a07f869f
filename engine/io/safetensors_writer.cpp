#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

namespace qvl {

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path, std::map<std::string, std::string> metadata)
    : path_(std::move(path)), metadata_(std::move(metadata)) {
  temp_path_ = path_;
  temp_path_ += ".partial";
}

SafetensorsWriter::~SafetensorsWriter() {
  if (out_) std::fclose(out_);
  if (!finished_) {
    std::error_code ignored;
    std::filesystem::remove(temp_path_, ignored);
  }
}

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

  out_ = std::fopen(temp_path_.c_str(), "wb");
  if (!out_) fail(temp_path_.string(), ": cannot create: ", std::strerror(errno));
  if (std::fwrite(len, 1, 8, out_) != 8 || std::fwrite(text.data(), 1, text.size(), out_) != text.size())
    fail(temp_path_.string(), ": write failed: ", std::strerror(errno));
}

void SafetensorsWriter::append(const void* data, std::size_t bytes) {
  if (finished_) fail(path_.string(), ": append after finish");
  if (!out_) write_header();
  if (written_ + bytes > offset_) fail(path_.string(), ": more bytes appended than the declared tensors hold");
  if (bytes && std::fwrite(data, 1, bytes, out_) != bytes) fail(temp_path_.string(), ": write failed: ", std::strerror(errno));
  written_ += bytes;
}

void SafetensorsWriter::finish() {
  if (!out_) write_header();
  if (written_ != offset_) fail(path_.string(), ": ", written_, " bytes written but ", offset_, " declared");
  const bool ok = std::fflush(out_) == 0 && ::fsync(fileno(out_)) == 0;
  std::fclose(out_);
  out_ = nullptr;
  if (!ok) fail(temp_path_.string(), ": flush failed: ", std::strerror(errno));
  std::filesystem::rename(temp_path_, path_);
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
