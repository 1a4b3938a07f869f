#pragma once
// The Qwen2/Qwen3 pre-tokeniser split, hand-compiled from its regex (the alternatives are tried in order at each
// position, exactly as the regex engine does):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N} | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ |
//   \s+(?!\S) | \s+
// A hand-written matcher avoids a regex library with Unicode classes and look-ahead, and is several times faster.
#include <string_view>
#include <utility>
#include <vector>

namespace qvl {

// Splits `text` (code points) into pieces; returns [begin, end) code point offsets covering the whole text.
std::vector<std::pair<std::size_t, std::size_t>> pre_tokenize(std::u32string_view text);

}  // namespace qvl
