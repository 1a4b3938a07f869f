#pragma once
// The Qwen3-VL text decoder (reference spec section 5): GQA attention with per-head q/k RMSNorm before the
// interleaved multimodal RoPE, SwiGLU MLP, DeepStack injection after the first layers, tied or untied head.
#include <span>
#include <vector>

#include "model/weights.h"

namespace qvl {

// Keys and values of every layer for the tokens seen so far ([capacity, kv heads, head_dim] each).
class KvCache {
public:
  KvCache(Backend& backend, const TextConfig& config, int64_t capacity);
  int64_t length() const { return length_; }

private:
  friend class TextDecoder;
  std::vector<Tensor> k_, v_;
  int64_t length_ = 0, capacity_ = 0;
};

// Image features to place into the prompt: rows `positions` (indices into this call's tokens) get the image
// embeddings instead of the pad embedding, and deepstack[l] is added there after decoder layer l.
struct VisionInjection {
  Tensor embeddings;
  std::vector<Tensor> deepstack;
  std::vector<int64_t> positions;
};

class TextDecoder {
public:
  TextDecoder(Backend& backend, const ModelConfig& config, const TextWeights& weights);
  // Runs `ids` at positions [cache.length(), cache.length() + ids.size()) with the given rotary tables
  // ([S, head_dim] host f32), appends their keys/values, and returns the last position's logits (host f32).
  Tensor forward(std::span<const int32_t> ids, const Tensor& cos, const Tensor& sin, const VisionInjection* vision,
                 KvCache& cache);

private:
  Backend& be_;
  const TextConfig& c_;
  const TextWeights& w_;
};

}  // namespace qvl
