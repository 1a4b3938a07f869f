#pragma once
// Images as the preprocessor needs them: 8-bit RGB, row-major, channels interleaved.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace qvl {

struct RgbImage {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
  uint8_t at(int64_t y, int64_t x, int c) const { return pixels[std::size_t((y * width + x) * 3 + c)]; }
};

struct ImageLimits {
  int64_t max_pixels = 8192LL * 8192;  // refused before decoding: a 50000x50000 PNG is never allocated
};

// Decodes a file (PNG, JPEG, BMP, WebP, TIFF, ... as the build's decoder supports) to RGB like PIL's
// convert("RGB"): EXIF orientation applied, grayscale expanded, alpha dropped (not composited), 16-bit reduced.
// Throws qvl::Error naming the file for unreadable, corrupt, empty or oversized images.
RgbImage load_image(const std::filesystem::path& path, const ImageLimits& limits = {});

}  // namespace qvl
