#pragma once
// Images as the preprocessor needs them: 8-bit RGB, row-major, channels interleaved.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/limits.h"

namespace qvl {

struct RgbImage {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
  uint8_t at(int64_t y, int64_t x, int c) const { return pixels[std::size_t((y * width + x) * 3 + c)]; }
};

struct ImageLimits {
  int64_t max_pixels = limits::kImagePixels;         // from the header, before decoding: a 50000x50000 PNG is never allocated
  int64_t max_file_bytes = limits::kImageFileBytes;  // checked before the file is read
};

// Decodes a file (PNG, JPEG, BMP or WebP, as the build's decoder supports) to RGB like PIL's convert("RGB"): EXIF
// orientation applied, grayscale expanded, alpha dropped (not composited), 16-bit reduced. Throws qvl::Error naming
// the file for unreadable, corrupt, truncated, empty, unsized or oversized images; the size limits are checked
// from the file's own header before any pixel memory exists, and the bytes checked are the bytes decoded.
RgbImage load_image(const std::filesystem::path& path, const ImageLimits& limits = {});

// (width, height) from a file's header, checked as load_image checks it, without decoding.
std::pair<int64_t, int64_t> image_file_size(const std::filesystem::path& path, const ImageLimits& limits = {});

// An image of a request: pixels in memory, or a file whose size is read from its header when first asked and whose
// pixels are decoded only when the engine needs them — after the whole prompt has passed its limits, one image at a
// time — so that 10,000 references to one picture are refused by their token count, not after gigabytes of decoding.
class ImageInput {
public:
  ImageInput(RgbImage decoded);  // NOLINT(google-explicit-constructor): a decoded image is an input as it is
  static ImageInput file(std::filesystem::path path, ImageLimits limits = {});
  // The bytes of an image file held in memory (a picture sent over the network), sized from their header and decoded
  // when needed like a file; `name` stands for it in errors. Throws qvl::Error for more bytes than the limit.
  static ImageInput encoded(std::shared_ptr<const std::string> bytes, std::string name, ImageLimits limits = {});

  std::pair<int64_t, int64_t> size() const;  // (width, height) before any EXIF rotation
  // The pixels: a file is decoded now (and refused if its size is no longer the one its header gave).
  std::shared_ptr<const RgbImage> pixels() const;
  const std::filesystem::path& path() const { return path_; }  // empty for an image in memory
  // What the image is, for recognising it in a conversation kept between requests: a hash of the file's bytes (a
  // file renamed is the same image, one rewritten another; hashed at each ask) or of the pixels in memory.
  uint64_t content_key() const;

private:
  ImageInput() = default;
  std::filesystem::path path_;
  ImageLimits limits_;
  std::shared_ptr<const RgbImage> decoded_;
  std::shared_ptr<const std::string> encoded_;
  std::string name_;  // of the encoded bytes, in errors
  mutable std::optional<std::pair<int64_t, int64_t>> size_;  // read from the header when first asked
  mutable std::optional<uint64_t> content_key_;  // of pixels in memory
};

}  // namespace qvl
