#include "model/text_decoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace qvl {

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
                         AttentionWindow window)
    : be_(backend), c_(config.text), w_(weights), record_decode_steps_(record_decode_steps), window_(window) {}

DecoderActivations TextDecoder::allocate(int64_t s) {
  const int64_t hidden = c_.hidden_size, hq = c_.num_attention_heads, hkv = c_.num_key_value_heads, d = c_.head_dim;
  // a is the projections' norm slot: the backend allocates it on first use, in the type its products read.
  return {be_.alloc({s, hidden}),     Tensor(),                  be_.alloc({s, hq, d}),
          be_.alloc({s, hkv, d}),     be_.alloc({s, hkv, d}),    be_.alloc({s, hq, d}),
          be_.alloc({s, hidden}),     be_.alloc({s, c_.intermediate_size}), be_.alloc({s, c_.intermediate_size}),
          Tensor(),                   be_.alloc({1, w_.lm_head.rows()})};
}

Tensor TextDecoder::forward(std::span<const int32_t> ids, const Tensor& cos_host, const Tensor& sin_host,
                            const VisionInjection* vision, KvCache& cache) {
  const auto s = int64_t(ids.size());
  const int64_t past = cache.length_;
  if (s == 0) fail("decoder: no tokens to run");
  if (past + s > cache.capacity_)
    fail("the conversation needs ", past + s, " tokens but the context holds ", cache.capacity_);
  for (int32_t id : ids)
    if (id < 0 || id >= w_.embed_tokens.rows()) fail("decoder: token id ", id, " is outside the embedding table");
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

// One layer: q, k, v = proj(norm(x)); q/k head norms, RoPE, cache append; attention; x += o(attn);
// x += down(swiglu(norm(x))). Each projection states its norm and residual; the backend decides whether a norm runs
// inside the product that reads it or after the add that feeds it (projection.h).
void TextDecoder::run(DecoderActivations& b, const Position& at, const VisionInjection* vision, KvCache& cache) {
  const int64_t s = b.x.dim(0), hq = c_.num_attention_heads, d = c_.head_dim;
  const float eps = float(c_.rms_norm_eps);
  AttentionMask mask =
      at.past_on_device ? AttentionMask::causal_on_device(*at.past_on_device, at.max_past) : AttentionMask::causal(at.past);
  // The window is for prefill chunks (decode steps attend to every cached key) the backend runs block-sparse.
  if (window_.blocks > 0 && !at.past_on_device &&
      s >= std::max(AttentionWindow::kMinQueries, be_.limits().block_sparse_min_queries)) {
    const int64_t side = (at.past + s + AttentionMask::kSparseBlock - 1) / AttentionMask::kSparseBlock;
    mask = AttentionMask::causal_block_sparse(at.past, AttentionMask::local_global_layout(side, window_.blocks,
                                                                                          window_.global), side);
  }
  const int64_t kv_len = (at.past_on_device ? at.max_past : at.past) + s;
  const auto rms = [&](const NormWeights& n) { return RowNorm::rms(n, eps); };
  bool input_normed = false;  // b.a holds this layer's normed input (the previous layer's closing norm made it)
  for (std::size_t l = 0; l < w_.layers.size(); ++l) {
    const DecoderLayerWeights& L = w_.layers[l];
    be_.project(Projection::of(b.x, L.q, L.k, L.v, b.q, b.k, b.v).reading_norm(rms(L.input_norm), b.a, input_normed));
    be_.qk_norm_rope_append({&b.q, &b.k, &b.v, &L.q_norm.weight, &L.k_norm.weight, eps, &at.cos, &at.sin, &cache.k_[l],
                             &cache.v_[l], at.past, at.past_on_device});
    be_.attention(b.q, cache.k_[l], cache.v_[l], kv_len, mask, 1.0f / std::sqrt(float(d)), b.attn);
    const Tensor attn = b.attn.reshaped({s, hq * d});
    be_.project(Projection::add_to(b.x, attn, L.o, b.proj).then(rms(L.post_attention_norm), b.a));
    be_.project(Projection::swiglu(b.x, L.gate, L.up, b.gate, b.up).reading_norm(rms(L.post_attention_norm), b.a, true));
    // DeepStack features join the residual after the layer: the next layer's norm reads the sum, so it runs then.
    const bool deepstack = vision && l < vision->deepstack.size();
    input_normed = l + 1 < w_.layers.size() && !deepstack;
    Projection down = Projection::add_to(b.x, b.gate, L.down, b.proj);
    if (input_normed) down.then(rms(w_.layers[l + 1].input_norm), b.a);
    be_.project(down);
    if (deepstack) be_.add_rows(b.x, vision->deepstack[l], vision->positions);
  }
  // Only the last position's logits are needed (generation reads nothing else).
  const Tensor last = b.x.slice_rows(s - 1, s);
  be_.project(Projection::of(last, w_.lm_head, b.logits).reading_norm(rms(w_.final_norm), b.normed));
}

}  // namespace qvl
