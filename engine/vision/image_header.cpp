#include "vision/image_header.h"

#include <cstdlib>

namespace qvl {
namespace {
uint32_t be16(std::string_view s, std::size_t i) { return uint32_t(uint8_t(s[i])) << 8 | uint8_t(s[i + 1]); }
uint32_t be32(std::string_view s, std::size_t i) { return be16(s, i) << 16 | be16(s, i + 2); }
uint32_t le16(std::string_view s, std::size_t i) { return uint32_t(uint8_t(s[i + 1])) << 8 | uint8_t(s[i]); }
uint32_t le32(std::string_view s, std::size_t i) { return le16(s, i + 2) << 16 | le16(s, i); }
}  // namespace

std::optional<std::pair<int64_t, int64_t>> image_header_size(std::string_view s) {
  if (s.size() >= 24 && s.substr(0, 8) == "\x89PNG\r\n\x1a\n" && s.substr(12, 4) == "IHDR") return {{be32(s, 16), be32(s, 20)}};
  if (s.size() >= 10 && (s.substr(0, 6) == "GIF87a" || s.substr(0, 6) == "GIF89a")) return {{le16(s, 6), le16(s, 8)}};
  if (s.size() >= 26 && s.substr(0, 2) == "BM") return {{int64_t(int32_t(le32(s, 18))), std::llabs(int64_t(int32_t(le32(s, 22))))}};
  if (s.size() >= 30 && s.substr(0, 4) == "RIFF" && s.substr(8, 4) == "WEBP") {
    const auto chunk = s.substr(12, 4);
    if (chunk == "VP8 ") return {{le16(s, 26) & 0x3fff, le16(s, 28) & 0x3fff}};
    if (chunk == "VP8L") {
      const uint32_t b = le32(s, 21);
      return {{(b & 0x3fff) + 1, ((b >> 14) & 0x3fff) + 1}};
    }
    if (chunk == "VP8X") return {{int64_t(le32(s, 24) & 0xffffff) + 1, int64_t(le32(s, 27) & 0xffffff) + 1}};
  }
  if (s.size() >= 4 && uint8_t(s[0]) == 0xFF && uint8_t(s[1]) == 0xD8) {  // JPEG: walk the markers to a SOFn
    std::size_t i = 2;
    while (i + 9 < s.size()) {
      if (uint8_t(s[i]) != 0xFF) return std::nullopt;
      const uint8_t marker = uint8_t(s[i + 1]);
      if (marker == 0xFF) { ++i; continue; }
      const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
      if (sof) return {{be16(s, i + 7), be16(s, i + 5)}};
      i += 2 + be16(s, i + 2);
    }
  }
  return std::nullopt;
}

}  // namespace qvl
