#include "runtime/conversation_cache.h"

#include <algorithm>

namespace qvl {

ReusablePrefix reusable_prefix(const CachedConversation& kept, std::span<const int32_t> ids,
                               std::span<const uint64_t> image_keys, int32_t image_token_id) {
  const std::size_t limit = std::min(kept.ids.size(), ids.empty() ? 0 : ids.size() - 1);
  ReusablePrefix prefix;
  std::size_t image = 0, run_start = 0;
  bool in_image = false;
  std::size_t i = 0;
  for (; i < limit && kept.ids[i] == ids[i]; ++i) {
    const bool pad = ids[i] == image_token_id;
    if (pad && !in_image) {  // an image starts: the same picture, or the prefix ends here
      if (image >= kept.image_keys.size() || image >= image_keys.size() || kept.image_keys[image] != image_keys[image])
        break;
      run_start = i;
    }
    if (!pad && in_image) ++image;  // the previous image ended inside the prefix
    in_image = pad;
  }
  if (in_image) i = run_start;  // never half an image: its rows come from one pass of the vision tower
  prefix.tokens = int64_t(i);
  prefix.images = image;
  return prefix;
}

void ConversationCache::set_budget(uint64_t bytes) {
  budget_ = bytes;
  make_room(0);
}

std::optional<CachedConversation> ConversationCache::take(const std::string& id) {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; });
  if (it == entries_.end()) return std::nullopt;
  CachedConversation out = std::move(it->conversation);
  stored_ -= out.bytes();
  entries_.erase(it);
  return out;
}

void ConversationCache::put(const std::string& id, CachedConversation conversation) {
  forget(id);
  const uint64_t bytes = conversation.bytes();
  if (!conversation.cache || !make_room(bytes)) return;  // dropped: it alone is over the budget
  stored_ += bytes;
  entries_.push_front({id, std::move(conversation)});
}

void ConversationCache::evict_least_recent() {
  stored_ -= entries_.back().conversation.bytes();
  entries_.pop_back();
  ++evictions_;
}

bool ConversationCache::make_room(uint64_t bytes) {
  while (!entries_.empty() && stored_ + bytes > budget_) evict_least_recent();
  return bytes <= budget_;
}

uint64_t ConversationCache::measured(const std::function<uint64_t(const CachedConversation&)>& measure) const {
  uint64_t sum = 0;
  for (const Entry& e : entries_) sum += measure(e.conversation);
  return sum;
}

void ConversationCache::evict_down_to(uint64_t bytes,
                                      const std::function<uint64_t(const CachedConversation&)>& measure) {
  uint64_t held = measured(measure);
  while (!entries_.empty() && held > bytes) {
    held -= measure(entries_.back().conversation);
    evict_least_recent();
  }
}

void ConversationCache::forget(const std::string& id) { take(id); }

void ConversationCache::clear() {
  entries_.clear();
  stored_ = 0;
}

ConversationCacheStats ConversationCache::stats() const {
  ConversationCacheStats s{int64_t(entries_.size()), 0, stored_, budget_, evictions_};
  for (const Entry& e : entries_) s.tokens += int64_t(e.conversation.ids.size());
  return s;
}

}  // namespace qvl
