#include "vision/image_header.h"

#include <cstdlib>

namespace qvl {
namespace {
uint32_t be16(std::string_view s, std::size_t i) { return uint32_t(uint8_t(s[i])) << 8 | uint8_t(s[i + 1]); }
uint32_t be32(std::string_view s, std::size_t i) { return be16(s, i) << 16 | be16(s, i + 2); }
uint32_t le16(std::string_view s, std::size_t i) { return uint32_t(uint8_t(s[i + 1])) << 8 | uint8_t(s[i]); }
uint32_t le32(std::string_view s, std::size_t i) { return le16(s, i + 2) << 16 | le16(s, i); }

// Chunks (length, type, data, CRC) from the signature to IEND; the header is the first chunk.
ImageHeader png_header(std::string_view s) {
  ImageHeader h{"PNG", be32(s, 16), be32(s, 20), true};
  for (std::size_t i = 8; i + 12 <= s.size();) {
    if (s.substr(i + 4, 4) == "IEND") {
      h.truncated = false;
      break;
    }
    i += 12 + std::size_t(be32(s, i));
  }
  return h;
}

// Skips entropy-coded data after a scan header: a 0xFF byte there is followed by 0x00 (a stuffed byte), a restart
// marker (0xD0-0xD7) or fill bytes; anything else is the next marker. Returns its offset (s.size() if none).
std::size_t skip_scan(std::string_view s, std::size_t i) {
  for (; i + 1 < s.size(); ++i) {
    if (uint8_t(s[i]) != 0xFF) continue;
    const uint8_t next = uint8_t(s[i + 1]);
    if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
      ++i;
      continue;
    }
    if (next != 0xFF) return i;
  }
  return s.size();
}

// Markers from SOI: the first frame header (SOFn) gives the size; the image is complete when EOI is reached.
ImageHeader jpeg_header(std::string_view s) {
  ImageHeader h{"JPEG", 0, 0, true};
  bool sized = false;
  std::size_t i = 2;
  while (i + 1 < s.size()) {
    if (uint8_t(s[i]) != 0xFF) break;  // not a marker where one must be: corrupt, reported as truncated
    const uint8_t marker = uint8_t(s[i + 1]);
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xD9) {  // EOI
      h.truncated = !sized;
      break;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // TEM, RSTn: no length
      i += 2;
      continue;
    }
    if (i + 4 > s.size()) break;
    const std::size_t length = be16(s, i + 2);
    if (length < 2) break;
    const bool frame = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (frame && !sized) {
      if (i + 9 > s.size()) break;
      h.height = be16(s, i + 5);
      h.width = be16(s, i + 7);
      sized = true;
    }
    i += 2 + length;
    if (marker == 0xDA) i = skip_scan(s, i);  // SOS: the scan's data follows its header
  }
  return h;
}
// Whether `h.height` rows of `bits`-per-pixel samples, each padded to 4 bytes, fit between the pixel offset and the end.
bool plain_rows_fit(std::string_view s, const ImageHeader& h, uint32_t bits) {
  if (h.width <= 0 || h.height <= 0) return true;  // refused for its size instead
  const int64_t row = (int64_t(bits) * h.width + 31) / 32 * 4;
  const int64_t available = int64_t(s.size()) - int64_t(le32(s, 10));
  return available >= 0 && row <= available / h.height;
}

// BMP: the size from the info header, of whichever generation its length names (OS/2 1.x's 12 bytes hold 16-bit
// sides; the later ones 32-bit, a negative height meaning top-down rows). Rows stored plain (no compression, or
// colour masks) must all be in the file from the pixel offset on.
std::optional<ImageHeader> bmp_header(std::string_view s) {
  const uint32_t info_size = le32(s, 14);
  if (info_size == 12) {
    ImageHeader h{"BMP", le16(s, 18), le16(s, 20)};
    h.truncated = !plain_rows_fit(s, h, le16(s, 24));
    return h;
  }
  if (s.size() < 34 || info_size < 16) return ImageHeader{"BMP", 0, 0, true};
  ImageHeader h{"BMP", int64_t(int32_t(le32(s, 18))), std::llabs(int64_t(int32_t(le32(s, 22))))};
  const uint32_t compression = info_size >= 20 ? le32(s, 30) : 0;
  constexpr uint32_t kPlain = 0, kBitfields = 3, kAlphaBitfields = 6;
  if (compression == kPlain || compression == kBitfields || compression == kAlphaBitfields)
    h.truncated = !plain_rows_fit(s, h, le16(s, 28));
  return h;
}

}  // namespace

std::optional<ImageHeader> read_image_header(std::string_view s) {
  if (s.size() >= 24 && s.substr(0, 8) == "\x89PNG\r\n\x1a\n" && s.substr(12, 4) == "IHDR") return png_header(s);
  if (s.size() >= 10 && (s.substr(0, 6) == "GIF87a" || s.substr(0, 6) == "GIF89a"))
    return ImageHeader{"GIF", le16(s, 6), le16(s, 8), uint8_t(s.back()) != 0x3B};  // the trailer byte
  if (s.size() >= 26 && s.substr(0, 2) == "BM") return bmp_header(s);
  if (s.size() >= 32 && s.substr(0, 4) == "RIFF" && s.substr(8, 4) == "WEBP") {
    const bool truncated = 8 + int64_t(le32(s, 4)) > int64_t(s.size());
    const auto chunk = s.substr(12, 4);
    if (chunk == "VP8 ") return ImageHeader{"WebP", le16(s, 26) & 0x3fff, le16(s, 28) & 0x3fff, truncated};
    if (chunk == "VP8L") {
      const uint32_t b = le32(s, 21);
      return ImageHeader{"WebP", (b & 0x3fff) + 1, ((b >> 14) & 0x3fff) + 1, truncated};
    }
    if (chunk == "VP8X")
      return ImageHeader{"WebP", int64_t(le32(s, 24) & 0xffffff) + 1, int64_t(le32(s, 27) & 0xffffff) + 1, truncated};
    return ImageHeader{"WebP", 0, 0, truncated};
  }
  if (s.size() >= 4 && uint8_t(s[0]) == 0xFF && uint8_t(s[1]) == 0xD8) return jpeg_header(s);
  return std::nullopt;
}

std::string_view image_signature(std::string_view s) {
  const auto starts = [&](std::string_view magic) { return s.substr(0, magic.size()) == magic; };
  if (starts("\x89PNG\r\n\x1a\n")) return "PNG";
  if (starts("\xFF\xD8\xFF")) return "JPEG";
  if (starts("GIF87a") || starts("GIF89a")) return "GIF";
  if (starts("BM")) return "BMP";
  if (starts("RIFF") && s.size() >= 12 && s.substr(8, 4) == "WEBP") return "WebP";
  if (starts(std::string_view("II*\0", 4)) || starts(std::string_view("MM\0*", 4))) return "TIFF";
  return {};
}

}  // namespace qvl
