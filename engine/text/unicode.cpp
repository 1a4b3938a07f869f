#include "text/unicode.h"

#include <algorithm>

#include "core/error.h"
#include "text/unicode_tables.h"

namespace qvl::unicode {
namespace t = unicode_tables;

namespace {

bool in_ranges(const t::CodeRange* ranges, std::size_t count, char32_t cp) {
  const auto* end = ranges + count;
  const auto* it = std::upper_bound(ranges, end, cp, [](char32_t c, const t::CodeRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

// Hangul syllables compose and decompose by arithmetic (Unicode section 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = t::kDecompositions + t::kDecompositionCount;
  const auto* it = std::lower_bound(t::kDecompositions, end, cp,
                                    [](const t::Decomposition& d, char32_t c) { return d.code_point < c; });
  if (it == end || it->code_point != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);  // decompositions nest (e.g. U+1E69 -> U+1E63 U+0307 -> s U+0323 U+0307)
  if (it->second) decompose(it->second, out);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* end = t::kCompositions + t::kCompositionCount;
  const auto* it = std::lower_bound(t::kCompositions, end, std::pair{a, b}, [](const t::Composition& c, std::pair<char32_t, char32_t> k) {
    return c.first != k.first ? c.first < k.first : c.second < k.second;
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

Utf8Step utf8_step(std::string_view bytes) {
  const auto b0 = uint8_t(bytes[0]);
  if (b0 < 0x80) return {Utf8Step::Valid, 1};
  std::size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
  else if (b0 == 0xE0) need = 2, lo = 0xA0;
  else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) need = 2;
  else if (b0 == 0xED) need = 2, hi = 0x9F;
  else if (b0 == 0xF0) need = 3, lo = 0x90;
  else if (b0 >= 0xF1 && b0 <= 0xF3) need = 3;
  else if (b0 == 0xF4) need = 3, hi = 0x8F;
  else return {Utf8Step::Invalid, 1};
  for (std::size_t k = 1; k <= need; ++k) {
    if (k >= bytes.size()) return {Utf8Step::Incomplete, bytes.size()};
    const auto b = uint8_t(bytes[k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return {Utf8Step::Invalid, k};
  }
  return {Utf8Step::Valid, need + 1};
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const Utf8Step step = utf8_step(bytes.substr(i));
    if (step.kind == Utf8Step::Valid) out.append(bytes.substr(i, step.length));
    else out.append("\xEF\xBF\xBD");
    i += step.length;
  }
  return out;
}

std::u32string decode_utf8(std::string_view bytes) {
  std::u32string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const Utf8Step step = utf8_step(bytes.substr(i));
    if (step.kind != Utf8Step::Valid) fail("text is not valid UTF-8 (byte ", i, " of ", bytes.size(), ")");
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + i);
    char32_t cp = step.length == 1 ? p[0] : step.length == 2 ? p[0] & 0x1F : step.length == 3 ? p[0] & 0x0F : p[0] & 0x07;
    for (std::size_t k = 1; k < step.length; ++k) cp = (cp << 6) | (p[k] & 0x3F);
    out.push_back(cp);
    i += step.length;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) append_utf8(out, cp);
  return out;
}

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(t::kLetters, t::kLetterCount, cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(t::kNumbers, t::kNumberCount, cp);
}

bool is_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = t::kCombiningClasses + t::kCombiningClassCount;
  const auto* it = std::lower_bound(t::kCombiningClasses, end, cp,
                                    [](const t::CombiningClass& c, char32_t x) { return c.code_point < x; });
  return it != end && it->code_point == cp ? it->ccc : 0;
}

std::u32string nfc(std::u32string_view text) {
  // Below U+0300 every character is already composed and none combines with a neighbour.
  if (std::all_of(text.begin(), text.end(), [](char32_t c) { return c < 0x300; })) return std::u32string(text);

  std::u32string d;
  d.reserve(text.size() + 8);
  for (char32_t cp : text) decompose(cp, d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (std::size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + std::ptrdiff_t(i), d.begin() + std::ptrdiff_t(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition (Unicode section 3.11, D117).
  std::u32string out;
  out.reserve(d.size());
  std::size_t starter = std::u32string::npos;  // index in `out` of the last starter
  int last_ccc = -1;
  for (char32_t cp : d) {
    const int ccc = combining_class(cp);
    if (starter != std::u32string::npos) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (const char32_t composite = compose_pair(out[starter], cp)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  return out;
}

}  // namespace qvl::unicode
