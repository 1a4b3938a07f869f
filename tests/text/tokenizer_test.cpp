// The tokenizer against Hugging Face's own output (tests/golden/tokenizer, tools/reference/make_tokenizer_goldens.py):
// exact ids for every golden string, decode goldens, round trips and streaming == whole decode.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_support.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace qvl {
namespace {

std::shared_ptr<const Tokenizer> qwen_tokenizer() {
  static const auto tok = Tokenizer::load(test::resource_dir() / "tokenizer" / "tokenizer.json");
  return tok;
}
nlohmann::json golden(const std::string& name) {
  return nlohmann::json::parse(test::read_bytes(std::string(QVL_TEST_GOLDEN_DIR) + "/tokenizer/" + name));
}

TEST(Tokenizer, LoadsTheQwenVocabulary) {
  const auto tok = qwen_tokenizer();
  EXPECT_EQ(tok->vocab_size(), 151669u);
  EXPECT_EQ(tok->token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok->token_id("<|image_pad|>"), 151655);
  EXPECT_EQ(tok->token_text(151668), "</think>");
  EXPECT_TRUE(tok->is_special(151645));
  EXPECT_FALSE(tok->is_special(151657));  // <tool_call> is added but not special
  EXPECT_FALSE(tok->is_special(872));
  EXPECT_THROW(tok->token_text(151669), Error);
}

TEST(Tokenizer, EncodesEveryGoldenStringExactlyLikeTransformers) {
  const auto tok = qwen_tokenizer();
  const auto cases = golden("encode.json")["cases"];
  ASSERT_GE(cases.size(), 300u);
  int mismatches = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<TokenId>>();
    const auto got = tok->encode(text);
    if (got != want && ++mismatches <= 10) {
      ADD_FAILURE() << "text " << nlohmann::json(text).dump() << "\n  want " << nlohmann::json(want).dump()
                    << "\n  got  " << nlohmann::json(got).dump();
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << cases.size();
}

TEST(Tokenizer, DecodesEveryGoldenSequenceExactlyLikeTransformers) {
  const auto tok = qwen_tokenizer();
  const auto decode_golden = golden("decode.json");
  for (const auto& c : decode_golden["cases"]) {
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    EXPECT_EQ(tok->decode(ids, c["skip_special"].get<bool>()), c["text"].get<std::string>()) << nlohmann::json(ids).dump();
  }
}

TEST(Tokenizer, RoundTripsAndStreamsLikeTheWholeDecode) {
  const auto tok = qwen_tokenizer();
  const auto encode_golden = golden("encode.json"), decode_golden = golden("decode.json");
  for (const auto& c : encode_golden["cases"]) {
    const std::string text = c["text"];
    const auto ids = tok->encode(text);
    // NFC is the only change a round trip may make.
    EXPECT_EQ(tok->decode(ids), unicode::encode_utf8(unicode::nfc(unicode::decode_utf8(text))));
    StreamingDetokenizer stream(tok);
    std::string streamed;
    for (TokenId id : ids) {
      const std::string piece = stream.push(id);
      EXPECT_EQ(unicode::utf8_lossy(piece), piece) << "a streamed piece must be whole UTF-8";
      streamed += piece;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, tok->decode(ids));
  }
  for (const auto& c : decode_golden["cases"]) {  // random ids: broken characters appear once, as U+FFFD
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    StreamingDetokenizer stream(tok, c["skip_special"].get<bool>());
    std::string streamed;
    for (TokenId id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    EXPECT_EQ(streamed, c["text"].get<std::string>());
  }
}

TEST(Tokenizer, StreamingHoldsBackASplitCharacterUntilItIsWhole) {
  const auto tok = qwen_tokenizer();
  // "你" is E4 BD A0: the byte tokens "ä½" (E4 BD) and "ł" (A0) carry it in two pieces.
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(stream.push(*tok->token_id("ä½")), "");
  EXPECT_EQ(stream.push(*tok->token_id("ł")), "你");
  EXPECT_EQ(stream.push(*tok->token_id("ä½")), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, RejectsInvalidUtf8InputNamingTheByte) {
  const auto tok = qwen_tokenizer();
  try {
    tok->encode("ok \xC3\x28 bad");
    FAIL() << "invalid UTF-8 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok->encode("\xED\xA0\x80"), Error);  // an encoded surrogate
}

TEST(Tokenizer, NamesTheProblemInABrokenTokenizerFile) {
  test::TempDir dir;
  auto expect_error = [&](const std::string& json, const std::string& fragment) {
    test::write_bytes(dir / "tokenizer.json", json);
    try {
      Tokenizer::load(dir / "tokenizer.json");
      FAIL() << "accepted " << json;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
  };
  expect_error("{", "not valid JSON");
  expect_error("{}", "model");
  expect_error(R"({"model": {"type": "Unigram", "vocab": {}, "merges": []}})", "only BPE");
  expect_error(R"({"model": {"vocab": {"a": 0}, "merges": []}})", "no token for byte");
  // Missing sections are named with the file (they were a raw json.exception.out_of_range.403 without a path).
  expect_error(R"({"model": {"merges": []}})", "model.vocab: missing");
  expect_error(R"({"model": {"vocab": {}}})", "model.merges: missing");
  expect_error(R"({"model": {"vocab": {}, "merges": []}, "added_tokens": 5})", "added_tokens: expected a list");
  EXPECT_THROW(Tokenizer::load(dir / "missing.json"), Error);
}

}  // namespace
}  // namespace qvl
