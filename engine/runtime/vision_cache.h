#pragma once
// Image features kept by picture content (ImageInput::content_key): a picture seen before — in another chat, after an
// edit before it cut its conversation's reuse, after its conversation was evicted — is neither decoded nor sent
// through the vision tower again. Kept on the host as the tower made them (f32), under a byte budget, least recently
// used out first. Features depend on the kernels that computed them: the engine empties the store whenever those
// change (device, weights, fusions).
#include <cstdint>
#include <list>
#include <vector>

#include "core/tensor.h"
#include "model/rope.h"

namespace qvl {

struct ImageFeatures {
  ImageGrid grid;                  // as preprocessed: the prompt's positions need it
  Tensor embeddings;               // [tokens, text hidden] f32, host
  std::vector<Tensor> deepstack;   // one per DeepStack block, the same shape
  uint64_t bytes() const;
};

struct VisionCacheStats {
  int64_t images = 0;
  uint64_t bytes = 0, budget = 0;
  int64_t hits = 0, evictions = 0;
  uint64_t recorded_tower_bytes = 0;  // device memory of the tower recorded for a picture size (RecordedVisionTower)
};

class VisionFeatureCache {
public:
  void set_budget(uint64_t bytes);  // evicts at once down to it; 0: nothing is kept
  uint64_t budget() const { return budget_; }
  // The features of the picture `key`, made the most recently used; nullptr when none are kept.
  const ImageFeatures* find(uint64_t key);
  // The same without touching the order or the counts (planning a request before it uses them).
  const ImageFeatures* peek(uint64_t key) const;
  // Keeps `features` under `key` (replacing any), evicting the least recently used first; dropped when alone over
  // the budget.
  void put(uint64_t key, ImageFeatures features);
  void clear();
  VisionCacheStats stats() const;

private:
  struct Entry {
    uint64_t key;
    ImageFeatures features;
  };
  void evict_to(uint64_t bytes);
  std::list<Entry> entries_;  // most recently used first
  uint64_t budget_ = 0, stored_ = 0;
  int64_t hits_ = 0, evictions_ = 0;
};

}  // namespace qvl
