#pragma once
// The Unicode pieces the tokenizer needs: UTF-8 decoding (strict) and lossy re-encoding (maximal-subpart
// replacement, as Rust's from_utf8_lossy and Python's errors="replace" do), character classes and NFC.
#include <cstdint>
#include <string>
#include <string_view>

namespace qvl::unicode {

// Decodes UTF-8; throws qvl::Error naming the byte offset of the first invalid sequence.
std::u32string decode_utf8(std::string_view bytes);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view text);

// One step of lossy decoding at `bytes[0]`.
struct Utf8Step {
  enum Kind { Valid, Invalid, Incomplete } kind;
  std::size_t length;  // Valid: bytes of the character; Invalid: bytes replaced by one U+FFFD; Incomplete: all
};
Utf8Step utf8_step(std::string_view bytes);
// Replaces every maximal invalid subpart by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

bool is_letter(char32_t cp);      // \p{L}
bool is_number(char32_t cp);      // \p{N}
bool is_whitespace(char32_t cp);  // \s: the White_Space property, as Oniguruma's Unicode \s
uint8_t combining_class(char32_t cp);

// Canonical composition (NFC). Text with no code point at or above U+0300 is returned unchanged without work.
std::u32string nfc(std::u32string_view text);

}  // namespace qvl::unicode
