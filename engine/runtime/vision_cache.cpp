#include "runtime/vision_cache.h"

#include <algorithm>

namespace qvl {

uint64_t ImageFeatures::bytes() const {
  uint64_t n = embeddings.nbytes();
  for (const Tensor& t : deepstack) n += t.nbytes();
  return n;
}

void VisionFeatureCache::set_budget(uint64_t bytes) {
  budget_ = bytes;
  evict_to(budget_);
}

const ImageFeatures* VisionFeatureCache::find(uint64_t key) {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (it == entries_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, it);
  ++hits_;
  return &entries_.front().features;
}

const ImageFeatures* VisionFeatureCache::peek(uint64_t key) const {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  return it == entries_.end() ? nullptr : &it->features;
}

void VisionFeatureCache::put(uint64_t key, ImageFeatures features) {
  const auto old = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (old != entries_.end()) {
    stored_ -= old->features.bytes();
    entries_.erase(old);
  }
  const uint64_t bytes = features.bytes();
  if (bytes > budget_) return;
  evict_to(budget_ - bytes);
  stored_ += bytes;
  entries_.push_front({key, std::move(features)});
}

void VisionFeatureCache::evict_to(uint64_t bytes) {
  while (!entries_.empty() && stored_ > bytes) {
    stored_ -= entries_.back().features.bytes();
    entries_.pop_back();
    ++evictions_;
  }
}

void VisionFeatureCache::clear() {
  entries_.clear();
  stored_ = 0;
}

VisionCacheStats VisionFeatureCache::stats() const {
  return {int64_t(entries_.size()), stored_, budget_, hits_, evictions_};
}

}  // namespace qvl
