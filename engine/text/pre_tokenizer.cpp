#include "text/pre_tokenizer.h"

#include "text/unicode.h"

namespace qvl {
namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

bool is_newline(char32_t c) { return c == U'\r' || c == U'\n'; }
// [^\s\p{L}\p{N}]
bool is_other(char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }

// Case folding for the contraction letters: ASCII, plus U+017F LONG S, which folds to 's'.
char32_t fold(char32_t c) { return c >= U'A' && c <= U'Z' ? c + 32 : c == 0x17F ? U's' : c; }

// Length of the piece that starts at `i`; always at least 1.
std::size_t match_at(std::u32string_view s, std::size_t i) {
  const std::size_t n = s.size();
  auto at = [&](std::size_t k) -> char32_t { return k < n ? s[k] : 0; };

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (s[i] == U'\'' && i + 1 < n) {
    const char32_t a = fold(at(i + 1)), b = fold(at(i + 2));
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    std::size_t j = i;
    if (!is_letter(s[j]) && !is_newline(s[j]) && !is_number(s[j]) && is_letter(at(j + 1))) ++j;
    if (j < n && is_letter(s[j])) {
      while (j < n && is_letter(s[j])) ++j;
      return j - i;
    }
  }
  // \p{N}
  if (is_number(s[i])) return 1;
  // ' '?[^\s\p{L}\p{N}]+[\r\n]*
  {
    std::size_t j = i;
    if (s[j] == U' ' && j + 1 < n && is_other(s[j + 1])) ++j;
    if (is_other(s[j])) {
      while (j < n && is_other(s[j])) ++j;
      while (j < n && is_newline(s[j])) ++j;
      return j - i;
    }
  }
  // The remaining alternatives all start with whitespace; s[i] is whitespace here.
  std::size_t end = i;
  while (end < n && is_whitespace(s[end])) ++end;
  // \s*[\r\n]+ : backtracking gives the run up to and including its last newline.
  for (std::size_t k = end; k > i; --k)
    if (is_newline(s[k - 1])) return k - i;
  // \s+(?!\S) : the whole run at the end of text, else all but its last character.
  if (end == n) return end - i;
  if (end - i >= 2) return end - 1 - i;
  // \s+
  return end - i;
}

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> pre_tokenize(std::u32string_view text) {
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = match_at(text, i);
    pieces.emplace_back(i, i + len);
    i += len;
  }
  return pieces;
}

}  // namespace qvl
