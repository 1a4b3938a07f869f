#pragma once
// The Qwen byte-level BPE tokenizer, read from a Hugging Face tokenizer.json: added tokens matched verbatim first
// (leftmost, longest), then NFC, the pre-tokeniser split, the GPT-2 byte-to-character map and BPE merges by rank.
// Decoding maps characters back to bytes and replaces invalid UTF-8 like the reference does.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qvl {

using TokenId = int32_t;

class Tokenizer {
public:
  // Throws qvl::Error naming the file and what is wrong with it.
  static std::shared_ptr<const Tokenizer> load(const std::filesystem::path& tokenizer_json);

  std::vector<TokenId> encode(std::string_view text) const;  // throws on invalid UTF-8
  // Concatenated bytes of the tokens, invalid UTF-8 replaced by U+FFFD.
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;
  // The bytes one token stands for (not UTF-8 checked); for streaming.
  std::string token_bytes(TokenId id) const;

  std::optional<TokenId> token_id(std::string_view token) const;
  const std::string& token_text(TokenId id) const;  // as spelled in the vocabulary
  bool is_special(TokenId id) const;
  std::size_t vocab_size() const { return id_to_token_.size(); }

private:
  struct AddedToken {
    std::string content;
    TokenId id;
    bool special;
  };
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  void encode_piece(std::string_view bytes, std::vector<TokenId>& out) const;
  void encode_ordinary(std::string_view text, std::vector<TokenId>& out) const;
  std::vector<TokenId> bpe(std::string_view bytes) const;

  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, TokenId> token_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
  std::vector<AddedToken> added_;               // longest first, for leftmost-longest matching
  std::vector<bool> special_;
  TokenId byte_token_[256] = {};   // the token of each single byte
  std::vector<int16_t> char_to_byte_;  // byte-level character (code point < 324) -> byte, or -1

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<TokenId>> cache_;  // BPE result per pre-token piece
};

// Turns a stream of token ids into text that only ever contains whole characters: a multi-byte character split
// across tokens is emitted once, complete. finish() flushes an incomplete tail as U+FFFD, so the concatenation of
// all outputs equals Tokenizer::decode of the whole sequence.
class StreamingDetokenizer {
public:
  explicit StreamingDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens = false);
  std::string push(TokenId id);
  std::string finish();

private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace qvl
