#include "model/text_decoder.h"

#include <cmath>

#include "core/error.h"

namespace qvl {

KvCache::KvCache(Backend& backend, const TextConfig& c, int64_t capacity) : capacity_(capacity) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    k_.push_back(backend.alloc({capacity, c.num_key_value_heads, c.head_dim}));
    v_.push_back(backend.alloc({capacity, c.num_key_value_heads, c.head_dim}));
  }
}

TextDecoder::TextDecoder(Backend& backend, const ModelConfig& config, const TextWeights& weights)
    : be_(backend), c_(config.text), w_(weights) {}

Tensor TextDecoder::forward(std::span<const int32_t> ids, const Tensor& cos_host, const Tensor& sin_host,
                            const VisionInjection* vision, KvCache& cache) {
  const auto s = int64_t(ids.size());
  const int64_t past = cache.length_;
  if (s == 0) fail("decoder: no tokens to run");
  if (past + s > cache.capacity_)
    fail("the conversation needs ", past + s, " tokens but the context holds ", cache.capacity_);
  const int64_t hidden = c_.hidden_size, hq = c_.num_attention_heads, hkv = c_.num_key_value_heads, d = c_.head_dim;
  const float eps = float(c_.rms_norm_eps);

  Tensor x = be_.alloc({s, hidden});
  be_.embed(w_.embed_tokens, ids, x);
  if (vision) be_.set_rows(x, vision->embeddings, vision->positions);
  const Tensor cos = be_.from_host(cos_host), sin = be_.from_host(sin_host);

  Tensor a = be_.alloc({s, hidden}), q = be_.alloc({s, hq, d}), k = be_.alloc({s, hkv, d}), v = be_.alloc({s, hkv, d}),
         attn = be_.alloc({s, hq, d}), proj = be_.alloc({s, hidden}), gate = be_.alloc({s, c_.intermediate_size}),
         up = be_.alloc({s, c_.intermediate_size});
  for (std::size_t l = 0; l < w_.layers.size(); ++l) {
    const DecoderLayerWeights& L = w_.layers[l];
    be_.rms_norm(x, L.input_norm.weight, eps, a);
    be_.linear(a, L.q.weight, L.q.bias_or_null(), q);
    be_.linear(a, L.k.weight, L.k.bias_or_null(), k);
    be_.linear(a, L.v.weight, L.v.bias_or_null(), v);
    be_.rms_norm(q, L.q_norm.weight, eps, q);  // per head, before RoPE
    be_.rms_norm(k, L.k_norm.weight, eps, k);
    be_.rope(q, cos, sin);
    be_.rope(k, cos, sin);
    be_.copy_rows(k, cache.k_[l], past);
    be_.copy_rows(v, cache.v_[l], past);
    be_.attention(q, cache.k_[l], cache.v_[l], past + s, AttentionMask::causal(past), 1.0f / std::sqrt(float(d)), attn);
    be_.linear(attn.reshaped({s, hq * d}), L.o.weight, L.o.bias_or_null(), proj);
    be_.add(x, proj, x);
    be_.rms_norm(x, L.post_attention_norm.weight, eps, a);
    be_.linear(a, L.gate.weight, nullptr, gate);
    be_.linear(a, L.up.weight, nullptr, up);
    be_.silu_mul(gate, up, gate);
    be_.linear(gate, L.down.weight, nullptr, proj);
    be_.add(x, proj, x);
    if (vision && l < vision->deepstack.size()) be_.add_rows(x, vision->deepstack[l], vision->positions);
  }
  cache.length_ = past + s;

  // Only the last position's logits are needed (generation reads nothing else).
  const Tensor last = x.slice_rows(s - 1, s);
  Tensor normed = be_.alloc({1, hidden});
  be_.rms_norm(last, w_.final_norm.weight, eps, normed);
  Tensor logits = be_.alloc({1, w_.lm_head.dim(0)});
  be_.linear(normed, w_.lm_head, nullptr, logits);
  return be_.to_host(logits);
}

}  // namespace qvl
