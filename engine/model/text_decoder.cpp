#include "model/text_decoder.h"

#include <cmath>

#include "core/error.h"

namespace qvl {

constexpr int64_t kWindowedMinRows = 16;  // the tiled kernels' query blocks: where a block layout runs

// The activations of one forward pass over `rows` tokens.
struct DecoderActivations {
  Tensor x, a, q, k, v, attn, proj, gate, up, normed, logits;
};

// Where this pass's tokens go: known on the host (run directly), or read from device tensors (a recorded step,
// replayed at every position; `max_past` bounds the position).
struct TextDecoder::Position {
  int64_t past = 0;
  const Tensor* past_on_device = nullptr;
  int64_t max_past = 0;
  Tensor cos, sin;
};

// The inputs and activations of a recorded decode step, alive as long as its cache.
struct RecordedDecodeStep {
  Tensor ids, past, cos, sin;
  DecoderActivations buffers;
  std::shared_ptr<RecordedWork> work;
};

KvCache::KvCache(Backend& backend, const TextConfig& c, int64_t capacity) : capacity_(capacity) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    k_.push_back(backend.alloc({capacity, c.num_key_value_heads, c.head_dim}));
    v_.push_back(backend.alloc({capacity, c.num_key_value_heads, c.head_dim}));
  }
}
KvCache::~KvCache() = default;

TextDecoder::TextDecoder(Backend& backend, const ModelConfig& config, const TextWeights& weights, bool record_decode_steps,
                         Fusions fusions, AttentionWindow window)
    : be_(backend), c_(config.text), w_(weights), record_decode_steps_(record_decode_steps), fusions_(fusions),
      window_(window) {}

DecoderActivations TextDecoder::allocate(int64_t s) {
  const int64_t hidden = c_.hidden_size, hq = c_.num_attention_heads, hkv = c_.num_key_value_heads, d = c_.head_dim;
  // a (the norms' output) feeds only the projections: with the norm folded in, it is their GEMMs' operand.
  Tensor a = fusions_.norm_into_projection ? be_.alloc_matmul_input({s, hidden}, w_.layers.front().q.weight.dtype())
                                           : be_.alloc({s, hidden});
  return {be_.alloc({s, hidden}),     std::move(a),              be_.alloc({s, hq, d}),
          be_.alloc({s, hkv, d}),     be_.alloc({s, hkv, d}),    be_.alloc({s, hq, d}),
          be_.alloc({s, hidden}),     be_.alloc({s, c_.intermediate_size}), be_.alloc({s, c_.intermediate_size}),
          be_.alloc({1, hidden}),     be_.alloc({1, w_.lm_head.dim(0)})};
}

Tensor TextDecoder::forward(std::span<const int32_t> ids, const Tensor& cos_host, const Tensor& sin_host,
                            const VisionInjection* vision, KvCache& cache) {
  const auto s = int64_t(ids.size());
  const int64_t past = cache.length_;
  if (s == 0) fail("decoder: no tokens to run");
  if (past + s > cache.capacity_)
    fail("the conversation needs ", past + s, " tokens but the context holds ", cache.capacity_);
  for (int32_t id : ids)
    if (id < 0 || id >= w_.embed_tokens.dim(0)) fail("decoder: token id ", id, " is outside the embedding table");
  // One-token steps replay the step recorded for this cache, or record it now; backends that cannot record (the
  // CPU, or a GPU while per-kernel timing is on) run the step directly below.
  if (s == 1 && !vision && record_decode_steps_ &&
      ((cache.decode_step_ && cache.decode_step_->work) || be_.begin_recording()))
    return forward_recorded(ids[0], cos_host, sin_host, cache);

  DecoderActivations b = allocate(s);
  be_.embed(w_.embed_tokens, ids, b.x);
  if (vision) be_.set_rows(b.x, vision->embeddings, vision->positions);
  run(b, {past, nullptr, past, be_.from_host(cos_host), be_.from_host(sin_host)}, vision, cache);
  cache.length_ = past + s;
  return be_.to_host(b.logits);
}

// Called with recording begun, or with the step already recorded.
Tensor TextDecoder::forward_recorded(int32_t id, const Tensor& cos_host, const Tensor& sin_host, KvCache& cache) {
  const int64_t past = cache.length_;
  if (!cache.decode_step_) cache.decode_step_ = std::make_unique<RecordedDecodeStep>();
  RecordedDecodeStep& step = *cache.decode_step_;
  if (!step.work) {
    try {
      // Inputs and activations outlive the recording: its kernels use these addresses at every replay.
      step.ids = be_.alloc_indices(1);
      step.past = be_.alloc_indices(1);
      step.cos = be_.alloc({1, c_.head_dim});
      step.sin = be_.alloc({1, c_.head_dim});
      step.buffers = allocate(1);
      be_.embed_at(w_.embed_tokens, step.ids, step.buffers.x);
      run(step.buffers, {past, &step.past, cache.capacity_ - 1, step.cos, step.sin}, nullptr, cache);
    } catch (...) {
      be_.end_recording();  // leave the backend able to run ops again
      throw;
    }
    step.work = be_.end_recording();
  }
  const int64_t id64 = id;
  be_.write_indices(step.ids, {&id64, 1});
  be_.write_indices(step.past, {&past, 1});
  be_.write(step.cos, cos_host);
  be_.write(step.sin, sin_host);
  be_.replay(*step.work);
  cache.length_ = past + 1;
  return be_.to_host(step.buffers.logits);
}

void TextDecoder::run(DecoderActivations& b, const Position& at, const VisionInjection* vision, KvCache& cache) {
  const int64_t s = b.x.dim(0), hq = c_.num_attention_heads, d = c_.head_dim;
  const float eps = float(c_.rms_norm_eps);
  AttentionMask mask =
      at.past_on_device ? AttentionMask::causal_on_device(*at.past_on_device, at.max_past) : AttentionMask::causal(at.past);
  if (window_.blocks > 0 && !at.past_on_device && s >= kWindowedMinRows) {
    const int64_t side = (at.past + s + AttentionMask::kSparseBlock - 1) / AttentionMask::kSparseBlock;
    mask = AttentionMask::causal_block_sparse(at.past, AttentionMask::local_global_layout(side, window_.blocks,
                                                                                          window_.global), side);
  }
  const int64_t kv_len = (at.past_on_device ? at.max_past : at.past) + s;
  // Folded (decode on a GPU): each norm rides in the projection that reads it, each residual add in the projection
  // that feeds it. Otherwise b.a holds each layer's normed input, made by the previous layer's closing add + norm.
  const bool fold = fusions_.norm_into_projection && be_.folds_norms_into_projections(s);
  // Residual add, then the RMSNorm that reads the sum: one fused pass, or the Backend's unfused sequence.
  auto add_then_norm = [&](const Tensor& residual, const NormWeights& norm) {
    if (fusions_.add_rms_norm) be_.add_rms_norm(b.x, residual, norm.weight, eps, b.a);
    else be_.Backend::add_rms_norm(b.x, residual, norm.weight, eps, b.a);
  };
  if (!fold) be_.rms_norm(b.x, w_.layers.front().input_norm.weight, eps, b.a);
  for (std::size_t l = 0; l < w_.layers.size(); ++l) {
    const DecoderLayerWeights& L = w_.layers[l];
    if (fold)
      be_.rms_norm_qkv_projection(b.x, L.input_norm.weight, eps, b.a, L.q.weight, L.q.bias_or_null(), L.k.weight,
                                  L.k.bias_or_null(), L.v.weight, L.v.bias_or_null(), b.q, b.k, b.v);
    else if (fusions_.qkv_projection)
      be_.qkv_projection(b.a, L.q.weight, L.q.bias_or_null(), L.k.weight, L.k.bias_or_null(), L.v.weight,
                         L.v.bias_or_null(), b.q, b.k, b.v);
    else
      be_.Backend::qkv_projection(b.a, L.q.weight, L.q.bias_or_null(), L.k.weight, L.k.bias_or_null(), L.v.weight,
                                  L.v.bias_or_null(), b.q, b.k, b.v);
    // Per-head q/k norms before RoPE, then k and v into the cache: one fused op, or the Backend's unfused sequence.
    if (fusions_.qk_norm_rope_append)
      be_.qk_norm_rope_append(b.q, b.k, b.v, L.q_norm.weight, L.k_norm.weight, eps, at.cos, at.sin, cache.k_[l],
                              cache.v_[l], at.past, at.past_on_device);
    else
      be_.Backend::qk_norm_rope_append(b.q, b.k, b.v, L.q_norm.weight, L.k_norm.weight, eps, at.cos, at.sin,
                                       cache.k_[l], cache.v_[l], at.past, at.past_on_device);
    if (fusions_.flash_attention)
      be_.attention(b.q, cache.k_[l], cache.v_[l], kv_len, mask, 1.0f / std::sqrt(float(d)), b.attn);
    else
      be_.attention_unfused(b.q, cache.k_[l], cache.v_[l], kv_len, mask, 1.0f / std::sqrt(float(d)), b.attn);
    const Tensor attn = b.attn.reshaped({s, hq * d});
    const bool deepstack = vision && l < vision->deepstack.size();
    if (fold) {
      be_.linear_add(attn, L.o.weight, L.o.bias_or_null(), b.proj, b.x);
      be_.rms_norm_swiglu_projection(b.x, L.post_attention_norm.weight, eps, b.a, L.gate.weight, L.up.weight, b.gate,
                                     b.up);
      be_.linear_add(b.gate, L.down.weight, nullptr, b.proj, b.x);
      if (deepstack) be_.add_rows(b.x, vision->deepstack[l], vision->positions);
      continue;
    }
    be_.linear(attn, L.o.weight, L.o.bias_or_null(), b.proj);
    add_then_norm(b.proj, L.post_attention_norm);
    if (fusions_.swiglu_projection) be_.swiglu_projection(b.a, L.gate.weight, L.up.weight, b.gate, b.up);
    else be_.Backend::swiglu_projection(b.a, L.gate.weight, L.up.weight, b.gate, b.up);
    be_.linear(b.gate, L.down.weight, nullptr, b.proj);
    if (l + 1 < w_.layers.size() && !deepstack) {
      add_then_norm(b.proj, w_.layers[l + 1].input_norm);
      continue;
    }
    be_.add(b.x, b.proj, b.x);
    if (deepstack) be_.add_rows(b.x, vision->deepstack[l], vision->positions);
    if (l + 1 < w_.layers.size()) be_.rms_norm(b.x, w_.layers[l + 1].input_norm.weight, eps, b.a);
  }
  // Only the last position's logits are needed (generation reads nothing else).
  be_.rms_norm(b.x.slice_rows(s - 1, s), w_.final_norm.weight, eps, b.normed);
  be_.linear(b.normed, w_.lm_head, nullptr, b.logits);
}

}  // namespace qvl
