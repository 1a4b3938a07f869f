#pragma once
// Reads an image's format and dimensions from its bytes without decoding it, so that oversized images are refused
// before any pixel memory is allocated, and files that end before their image does are refused instead of being
// decoded half grey. Only formats whose header is read here are handed to a decoder: a format this cannot size is
// never decoded.
#include <cstdint>
#include <optional>
#include <string_view>

namespace qvl {

struct ImageHeader {
  std::string_view format;   // "PNG", "JPEG", "GIF", "BMP" or "WebP"
  int64_t width = 0, height = 0;
  bool truncated = false;    // the file ends before the image does (PNG before IEND, JPEG before its end marker,
                             // BMP short of its rows, WebP short of its RIFF size)
};

// `file` is the whole file. nullopt when the format is not one of the above. A JPEG is walked marker by marker to its
// frame header (an EXIF block of any size before it, as the decompression-bomb check must not be skipped) and
// through its scans to the end marker.
std::optional<ImageHeader> read_image_header(std::string_view file);

// The format the first bytes announce ("PNG", "JPEG", "GIF", "BMP", "WebP", "TIFF"; empty if none of them), from the
// signature alone: for the error when read_image_header finds no header (a PNG signature followed by garbage is a
// damaged PNG, not "not a PNG"; a TIFF is a format qvl does not read).
std::string_view image_signature(std::string_view file);

}  // namespace qvl
