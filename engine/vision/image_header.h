#pragma once
// Reads an image's dimensions from its header without decoding it, so oversized images are refused before any
// pixel memory is allocated.
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

namespace qvl {

// (width, height) for PNG, JPEG, GIF, BMP and WebP headers; nullopt when the format is not recognised.
std::optional<std::pair<int64_t, int64_t>> image_header_size(std::string_view head);

}  // namespace qvl
