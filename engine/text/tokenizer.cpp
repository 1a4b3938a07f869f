#include "text/tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "core/limits.h"
#include "io/json_fields.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"

namespace qvl {
namespace {

// GPT-2's byte-to-character map: printable bytes stand for themselves, the rest move to U+0100 and up.
std::vector<char32_t> byte_to_char_table() {
  std::vector<char32_t> table(256);
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[std::size_t(b)] = printable ? char32_t(b) : char32_t(256 + next++);
  }
  return table;
}

constexpr std::size_t kMaxCachedPieces = 1 << 16;

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::filesystem::path& path) {
  const nlohmann::json j = read_json_file(path);
  const std::string file = path.string();
  auto tok = std::shared_ptr<Tokenizer>(new Tokenizer);
  const JsonFields top(j, file);
  const JsonFields model = top.object("model");
  if (model.optional<std::string>("type", "BPE") != "BPE") fail(file, ": model.type: only BPE is supported");
  if (model.optional<bool>("byte_fallback", false)) fail(file, ": model.byte_fallback: not supported");

  // Vocabulary.
  for (const char* section : {"vocab", "merges"})
    if (!model.has(section)) fail(file, ": model.", section, ": missing");
  const auto& vocab = model.json().at("vocab");
  if (!vocab.is_object()) fail(file, ": model.vocab: expected an object");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limits::kVocabulary)
      fail(file, ": model.vocab['", token, "']: expected a token id below the limit of ", limits::kVocabulary);
    const auto i = std::size_t(id.get<int64_t>());
    if (tok->id_to_token_.size() <= i) tok->id_to_token_.resize(i + 1);
    tok->id_to_token_[i] = token;
    tok->token_to_id_[token] = TokenId(i);
  }
  // Added tokens may extend the id range.
  if (top.has("added_tokens")) {
    if (!j.at("added_tokens").is_array()) fail(file, ": added_tokens: expected a list");
    for (const auto& a : j.at("added_tokens")) {
      const JsonFields f(a, file, "added_tokens[].");
      const auto id = f.required<int64_t>("id");
      const auto content = f.required<std::string>("content");
      if (id < 0 || id >= limits::kVocabulary || content.empty())
        fail(file, ": added_tokens: bad entry '", content, "' (ids are below the limit of ", limits::kVocabulary, ")");
      if (tok->id_to_token_.size() <= std::size_t(id)) tok->id_to_token_.resize(std::size_t(id) + 1);
      tok->id_to_token_[std::size_t(id)] = content;
      tok->token_to_id_[content] = TokenId(id);
      tok->added_.push_back({content, TokenId(id), f.optional<bool>("special", false)});
    }
  }
  std::stable_sort(tok->added_.begin(), tok->added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  tok->special_.assign(tok->id_to_token_.size(), false);
  for (const auto& a : tok->added_) tok->special_[std::size_t(a.id)] = a.special;

  // Byte-level alphabet: every byte must have a token.
  const auto byte_chars = byte_to_char_table();
  tok->char_to_byte_.assign(512, -1);
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_chars[std::size_t(b)];
    tok->char_to_byte_[c] = int16_t(b);
    std::string spelled;
    unicode::append_utf8(spelled, c);
    const auto it = tok->token_to_id_.find(spelled);
    if (it == tok->token_to_id_.end()) fail(file, ": model.vocab has no token for byte ", b, " ('", spelled, "')");
    tok->byte_token_[b] = it->second;
  }

  // Merges, ranked by position: "a b" strings (older files) or ["a", "b"] pairs.
  const auto& merges = model.json().at("merges");
  if (!merges.is_array()) fail(file, ": model.merges: expected a list");
  int32_t rank = 0;
  for (const auto& m : merges) {
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto space = s.find(' ', 1);
      if (space == std::string::npos) fail(file, ": model.merges[", rank, "]: expected 'left right'");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail(file, ": model.merges[", rank, "]: expected a pair of strings");
    }
    const auto l = tok->token_to_id_.find(left), r = tok->token_to_id_.find(right),
               result = tok->token_to_id_.find(left + right);
    if (l == tok->token_to_id_.end() || r == tok->token_to_id_.end() || result == tok->token_to_id_.end())
      fail(file, ": model.merges[", rank, "]: '", left, "' + '", right, "' uses a token missing from the vocabulary");
    const uint64_t key = (uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second);
    tok->merges_.emplace(key, Merge{rank, result->second});  // first (lowest) rank wins on duplicates
    ++rank;
  }
  for (std::size_t i = 0; i < tok->id_to_token_.size(); ++i)
    if (tok->id_to_token_[i].empty()) fail(file, ": token id ", i, " has no entry in the vocabulary");
  return tok;
}

std::vector<TokenId> Tokenizer::bpe(std::string_view bytes) const {
  // Symbols form a linked list; candidate merges sit in a heap ordered by (rank, position), as in the reference.
  struct Symbol {
    TokenId id;
    int prev, next;
  };
  std::vector<Symbol> symbols(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i)
    symbols[i] = {byte_token_[uint8_t(bytes[i])], int(i) - 1, i + 1 < bytes.size() ? int(i + 1) : -1};
  struct Candidate {
    int32_t rank;
    int pos;
    TokenId left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int pos) {
    if (pos < 0 || symbols[std::size_t(pos)].next < 0) return;
    const TokenId l = symbols[std::size_t(pos)].id, r = symbols[std::size_t(symbols[std::size_t(pos)].next)].id;
    const auto it = merges_.find((uint64_t(uint32_t(l)) << 32) | uint32_t(r));
    if (it != merges_.end()) heap.push({it->second.rank, pos, l, r});
  };
  for (int i = 0; i + 1 < int(bytes.size()); ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[std::size_t(c.pos)];
    // Stale: the left symbol was merged away (id -1) or either side changed since this candidate was queued.
    if (left.id != c.left || left.next < 0 || symbols[std::size_t(left.next)].id != c.right) continue;
    Symbol& right = symbols[std::size_t(left.next)];
    left.id = merges_.at((uint64_t(uint32_t(c.left)) << 32) | uint32_t(c.right)).result;
    left.next = right.next;
    if (right.next >= 0) symbols[std::size_t(right.next)].prev = c.pos;
    right.id = -1;
    consider(left.prev);
    consider(c.pos);
  }
  std::vector<TokenId> out;
  for (int i = bytes.empty() ? -1 : 0; i >= 0; i = symbols[std::size_t(i)].next) out.push_back(symbols[std::size_t(i)].id);
  return out;
}

void Tokenizer::encode_piece(std::string_view bytes, std::vector<TokenId>& out) const {
  std::string key(bytes);
  {
    std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(key); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids = bpe(bytes);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard lock(cache_mutex_);
  if (cache_.size() >= kMaxCachedPieces) cache_.clear();  // bounded: a pathological text cannot grow it forever
  cache_.emplace(std::move(key), std::move(ids));
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<TokenId>& out) const {
  const std::u32string normalized = unicode::nfc(unicode::decode_utf8(text));
  const std::u32string_view view(normalized);
  std::string piece;
  for (const auto& [begin, end] : pre_tokenize(view)) {
    piece.clear();
    for (std::size_t i = begin; i < end; ++i) unicode::append_utf8(piece, view[i]);
    encode_piece(piece, out);
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 1);
  std::size_t segment = 0;  // start of the text not yet encoded
  for (std::size_t i = 0; i < text.size(); ++i) {
    for (const auto& a : added_) {  // longest first, so the first match at i is the longest
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      encode_ordinary(text.substr(segment, i - segment), out);
      out.push_back(a.id);
      i += a.content.size() - 1;
      segment = i + 1;
      break;
    }
  }
  encode_ordinary(text.substr(segment), out);
  return out;
}

std::string Tokenizer::token_bytes(TokenId id) const {
  const std::string& token = token_text(id);
  // Byte-level characters map back to bytes; a token with any other character (an added token such as
  // "<think>" is all printable ASCII, so this is rare) contributes its UTF-8 as is, as the reference decoder does.
  std::string bytes;
  try {
    for (char32_t c : unicode::decode_utf8(token)) {
      if (c >= char_to_byte_.size() || char_to_byte_[c] < 0) return token;
      bytes.push_back(char(char_to_byte_[c]));
    }
  } catch (const Error&) {
    return token;
  }
  return bytes;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return unicode::utf8_lossy(bytes);
}

std::optional<TokenId> Tokenizer::token_id(std::string_view token) const {
  const auto it = token_to_id_.find(std::string(token));
  return it == token_to_id_.end() ? std::nullopt : std::optional<TokenId>(it->second);
}

const std::string& Tokenizer::token_text(TokenId id) const {
  if (id < 0 || std::size_t(id) >= id_to_token_.size())
    fail("token id ", id, " is outside the vocabulary (", id_to_token_.size(), " tokens)");
  return id_to_token_[std::size_t(id)];
}

bool Tokenizer::is_special(TokenId id) const { return id >= 0 && std::size_t(id) < special_.size() && special_[std::size_t(id)]; }

StreamingDetokenizer::StreamingDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special_tokens) {}

std::string StreamingDetokenizer::push(TokenId id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  std::size_t i = 0;
  while (i < pending_.size()) {
    const auto step = unicode::utf8_step(std::string_view(pending_).substr(i));
    if (step.kind == unicode::Utf8Step::Incomplete) break;  // wait for the rest of the character
    if (step.kind == unicode::Utf8Step::Valid) out.append(pending_, i, step.length);
    else out.append("\xEF\xBF\xBD");
    i += step.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDetokenizer::finish() {
  std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
  pending_.clear();
  return out;
}

}  // namespace qvl
