#pragma once
// Pictures inside a request: `data:` URLs (RFC 2397) with base64 payloads, as the OpenAI API carries images.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qvl::serve {

struct DataUrl {
  std::string media_type;  // as written, e.g. "image/png" (may be empty)
  std::string bytes;       // the decoded payload
};

// nullopt when `url` is not a data: URL. Throws qvl::Error saying what is wrong for a data: URL that is not base64,
// whose base64 is malformed, or whose payload would exceed `max_bytes` (checked before decoding).
std::optional<DataUrl> parse_data_url(std::string_view url, uint64_t max_bytes);

// Standard base64 (RFC 4648 section 4, padding optional, line breaks and spaces skipped); throws qvl::Error at the
// first character that does not belong.
std::string decode_base64(std::string_view text);

}  // namespace qvl::serve
