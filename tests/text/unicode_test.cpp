// Unicode pieces checked against known values from the Unicode standard and Python's unicodedata.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"

namespace qvl::unicode {
namespace {

TEST(Unicode, ReplacesMaximalInvalidSubpartsLikeTheReference) {
  // Examples from the Unicode standard's "U+FFFD substitution of maximal subparts" (Table 3-8).
  EXPECT_EQ(utf8_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3 replacements
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");                         // truncated emoji: 1 replacement
  EXPECT_EQ(utf8_lossy("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
}

TEST(Unicode, ClassifiesLettersNumbersAndSpaces) {
  EXPECT_TRUE(is_letter(U'a'));
  EXPECT_TRUE(is_letter(U'ß'));
  EXPECT_TRUE(is_letter(U'你'));
  EXPECT_TRUE(is_letter(0x02B0));   // modifier letter (Lm)
  EXPECT_FALSE(is_letter(0x0301));  // combining mark (Mn)
  EXPECT_TRUE(is_number(U'٣'));
  EXPECT_TRUE(is_number(U'Ⅻ'));   // Nl
  EXPECT_TRUE(is_number(U'½'));   // No
  EXPECT_FALSE(is_number(U'x'));
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_TRUE(is_whitespace(0x85));
  EXPECT_FALSE(is_whitespace(0x200B));  // zero width space is not White_Space
  EXPECT_FALSE(is_whitespace(0x1C));    // Python's isspace says yes; the regex engine says no
}

TEST(Unicode, ComposesToNfc) {
  EXPECT_EQ(nfc(U"e\u0301"), U"\u00e9");
  EXPECT_EQ(nfc(U"\u1100\u1161\u11a8"), U"\uac01");           // Hangul LVT
  EXPECT_EQ(nfc(U"o\u0323\u0302"), U"\u1ed9");                 // reordered marks compose fully
  EXPECT_EQ(nfc(U"o\u0302\u0323"), U"\u1ed9");
  EXPECT_EQ(nfc(U"\u212b"), U"\u00c5");                        // ANGSTROM SIGN is a singleton
  EXPECT_EQ(nfc(U"\u0344"), U"\u0308\u0301");                  // excluded from composition
  EXPECT_EQ(nfc(U"a\u0301\u0301"), U"\u00e1\u0301");            // second mark is blocked
  EXPECT_EQ(nfc(U"plain ascii"), U"plain ascii");
}

TEST(Unicode, DecodesStrictlyAndEncodesBack) {
  const std::string s = "a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80";
  EXPECT_EQ(decode_utf8(s), U"aé你😀");
  EXPECT_EQ(encode_utf8(decode_utf8(s)), s);
  EXPECT_THROW(decode_utf8("\xC0\xAF"), Error);  // overlong
  EXPECT_THROW(decode_utf8("\xF4\x90\x80\x80"), Error);  // above U+10FFFF
}

std::vector<std::u32string> split(std::u32string_view s) {
  std::vector<std::u32string> out;
  for (const auto& [b, e] : pre_tokenize(s)) out.emplace_back(s.substr(b, e - b));
  return out;
}

TEST(PreTokenizer, FollowsTheRegexAlternativesInOrder) {
  using V = std::vector<std::u32string>;
  EXPECT_EQ(split(U"Hello world"), (V{U"Hello", U" world"}));
  EXPECT_EQ(split(U"don't"), (V{U"don", U"'t"}));
  EXPECT_EQ(split(U"I'LL"), (V{U"I", U"'LL"}));
  EXPECT_EQ(split(U"12345"), (V{U"1", U"2", U"3", U"4", U"5"}));
  EXPECT_EQ(split(U"a  b"), (V{U"a", U" ", U" b"}));           // \s+(?!\S) leaves the last space to the word
  EXPECT_EQ(split(U"x \n\n y"), (V{U"x", U" \n\n", U" y"}));   // \s*[\r\n]+
  EXPECT_EQ(split(U"end   "), (V{U"end", U"   "}));
  EXPECT_EQ(split(U" !!\n\nok"), (V{U" !!\n\n", U"ok"}));
  EXPECT_EQ(split(U"$5"), (V{U"$", U"5"}));
  EXPECT_EQ(split(U"\tx"), (V{U"\tx"}));
  EXPECT_EQ(split(U""), V{});
}

}  // namespace
}  // namespace qvl::unicode
