#pragma once
// Conversations kept between requests: each one's keys and values (a KvCache), the tokens they were computed for
// and the images among them, so that a follow-up question prefills only its new tokens and a regenerated answer
// only its last. Kept under a byte budget, least recently used evicted first. The engine owns the store (the caches
// live in its backends' memory); a request names its conversation by an id of the caller's choosing.
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/rope.h"
#include "model/text_decoder.h"

namespace qvl {

struct CachedConversation {
  std::vector<int32_t> ids;              // the tokens whose keys and values `cache` holds, in order
  std::vector<uint64_t> image_keys;      // ImageInput::content_key of each image among them, in order
  std::vector<ImageGrid> image_grids;    // and its patch grid (as decoded: an EXIF rotation may swap the sides)
  std::unique_ptr<KvCache> cache;
  uint64_t bytes() const { return cache ? cache->bytes() : 0; }
};

// How much of a new prompt a kept conversation already holds: the longest common prefix of the token ids, cut back
// to the start of an image whose content differs (its pad tokens are the same ids whatever the picture) or that the
// prefix would split, and short of the prompt's last token (its logits start the answer).
struct ReusablePrefix {
  int64_t tokens = 0;
  std::size_t images = 0;  // images wholly inside those tokens
};
ReusablePrefix reusable_prefix(const CachedConversation& kept, std::span<const int32_t> ids,
                               std::span<const uint64_t> image_keys, int32_t image_token_id);

struct ConversationCacheStats {
  int64_t conversations = 0, tokens = 0;
  uint64_t bytes = 0, budget = 0;
  int64_t evictions = 0;
};

class ConversationCache {
public:
  void set_budget(uint64_t bytes);  // evicts at once down to it; 0: nothing is kept
  uint64_t budget() const { return budget_; }
  // The conversation `id` kept, taken out of the store (a request owns it while it runs, then gives it back with
  // put); nullopt when none is kept.
  std::optional<CachedConversation> take(const std::string& id);
  // Keeps `conversation` under `id` when it fits the budget, evicting the least recently used others first.
  void put(const std::string& id, CachedConversation conversation);
  // Evicts the least recently used conversations until `bytes` more would fit; false when even an empty store
  // cannot take them.
  bool make_room(uint64_t bytes);
  // Evicts the least recently used conversations until those left measure at most `bytes` by `measure` (the pool's
  // bytes of a cache, say, where the budget counts its tensors).
  void evict_down_to(uint64_t bytes, const std::function<uint64_t(const CachedConversation&)>& measure);
  // What the kept conversations measure together by `measure`.
  uint64_t measured(const std::function<uint64_t(const CachedConversation&)>& measure) const;
  void forget(const std::string& id);
  void clear();
  ConversationCacheStats stats() const;

private:
  struct Entry {
    std::string id;
    CachedConversation conversation;
  };
  void evict_least_recent();
  std::list<Entry> entries_;  // most recently used first
  uint64_t budget_ = 0, stored_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace qvl
