#pragma once
// The Qwen3-VL text decoder (reference spec section 5): GQA attention with per-head q/k RMSNorm before the
// interleaved multimodal RoPE, SwiGLU MLP, DeepStack injection after the first layers, tied or untied head.
#include <memory>
#include <span>
#include <vector>

#include "model/weights.h"

namespace qvl {

struct RecordedDecodeStep;
struct DecoderActivations;

// Keys and values of every layer for the tokens seen so far ([capacity, kv heads, head_dim] each), and the decode
// step recorded against them (its graph writes into these very tensors).
class KvCache {
public:
  KvCache(Backend& backend, const TextConfig& config, int64_t capacity);
  ~KvCache();
  int64_t length() const { return length_; }

private:
  friend class TextDecoder;
  std::vector<Tensor> k_, v_;
  int64_t length_ = 0, capacity_ = 0;
  std::unique_ptr<RecordedDecodeStep> decode_step_;
};

// Image features to place into the prompt: rows `positions` (indices into this call's tokens) get the image
// embeddings instead of the pad embedding, and deepstack[l] is added there after decoder layer l.
struct VisionInjection {
  Tensor embeddings;
  std::vector<Tensor> deepstack;
  std::vector<int64_t> positions;
};

// Block-sparse prefill attention for long contexts (AttentionMask::local_global_layout): each query block of 64
// positions sees the `blocks` key blocks up to its own and the first `global` blocks. blocks = 0: dense. Prefill
// chunks of 16 tokens or more only; decode steps attend to every cached key. An approximation to choose: it changes
// the answers (covering every block, it gives the dense logits exactly).
struct AttentionWindow {
  int64_t blocks = 0, global = 1;
  // Chunks shorter than this attend densely on every backend (and shorter than the backend's own limit, where that
  // is higher): one query block of the tiled kernels, so the CPU and the GPU give the same answers.
  static constexpr int64_t kMinQueries = 16;
};

class TextDecoder {
public:
  // record_decode_steps: one-token steps are recorded once per cache and replayed (CUDA graphs) where the backend
  // can record; the replay reads token id, position and rotary rows from device tensors written before it.
  // Fused or unfused kernels are the backend's choice (Backend::set_fusions).
  TextDecoder(Backend& backend, const ModelConfig& config, const TextWeights& weights, bool record_decode_steps = true,
              AttentionWindow window = {});
  // Runs `ids` at positions [cache.length(), cache.length() + ids.size()) with the given rotary tables
  // ([S, head_dim] host f32), appends their keys/values, and returns the last position's logits (host f32).
  Tensor forward(std::span<const int32_t> ids, const Tensor& cos, const Tensor& sin, const VisionInjection* vision,
                 KvCache& cache);

private:
  struct Position;
  DecoderActivations allocate(int64_t rows);
  void run(DecoderActivations& b, const Position& at, const VisionInjection* vision, KvCache& cache);
  Tensor forward_recorded(int32_t id, const Tensor& cos, const Tensor& sin, KvCache& cache);

  Backend& be_;
  const TextConfig& c_;
  const TextWeights& w_;
  bool record_decode_steps_;
  AttentionWindow window_;
};

}  // namespace qvl
