#include "serve/data_url.h"

#include <array>
#include <cctype>

#include "core/error.h"

namespace qvl::serve {

namespace {

constexpr std::array<int8_t, 256> base64_values() {
  std::array<int8_t, 256> v{};
  for (auto& x : v) x = -1;
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) v[uint8_t(alphabet[i])] = int8_t(i);
  return v;
}

bool starts_with_ignoring_case(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(uint8_t(s[i])) != prefix[i]) return false;
  return true;
}

}  // namespace

std::string decode_base64(std::string_view text) {
  static constexpr auto kValues = base64_values();
  while (!text.empty() && (text.back() == '=' || std::isspace(uint8_t(text.back())))) text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() / 4 * 3 + 2);
  uint32_t bits = 0;
  int count = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == '\r' || text[i] == ' ' || text[i] == '\t') continue;  // wrapped lines (MIME)
    const int8_t v = kValues[uint8_t(text[i])];
    if (v < 0) fail("character ", i, " of the base64 data is not base64 (byte ", int(uint8_t(text[i])), ")");
    bits = bits << 6 | uint32_t(v);
    if (++count == 4) {
      out += char(bits >> 16);
      out += char(bits >> 8 & 0xff);
      out += char(bits & 0xff);
      bits = 0;
      count = 0;
    }
  }
  if (count == 1) fail("base64 ending in a single character cannot be whole bytes");
  if (count == 2) out += char(bits >> 4);
  if (count == 3) {
    out += char(bits >> 10);
    out += char(bits >> 2 & 0xff);
  }
  return out;
}

std::optional<DataUrl> parse_data_url(std::string_view url, uint64_t max_bytes) {
  if (!starts_with_ignoring_case(url, "data:")) return std::nullopt;
  const std::size_t comma = url.find(',');
  if (comma == std::string_view::npos) fail("a data: URL without a comma before its data");
  const std::string_view header = url.substr(5, comma - 5);
  const std::string_view payload = url.substr(comma + 1);
  const std::size_t semicolon = header.find(';');
  DataUrl result;
  result.media_type = std::string(header.substr(0, semicolon));
  if (semicolon == std::string_view::npos || !starts_with_ignoring_case(header.substr(header.rfind(';') + 1), "base64") ||
      header.size() - header.rfind(';') - 1 != 6)
    fail("a data: URL whose data is not base64 (write data:", result.media_type, ";base64,...)");
  if (payload.size() / 4 * 3 > max_bytes)
    fail("its data decodes to about ", payload.size() / 4 * 3, " bytes, over the limit of ", max_bytes);
  result.bytes = decode_base64(payload);
  return result;
}

}  // namespace qvl::serve
