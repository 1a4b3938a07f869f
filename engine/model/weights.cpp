#include "model/weights.h"

#include <algorithm>

namespace qvl {

namespace {

struct Binder {
  const Checkpoint& ck;
  Backend& backend;
  const std::function<void(double)>& progress;
  mutable uint64_t bytes_done = 0;
  Tensor counted(Tensor t) const {
    bytes_done += uint64_t(t.nbytes());
    if (progress) progress(std::min(1.0, double(bytes_done) / double(std::max<uint64_t>(1, ck.total_bytes()))));
    return t;
  }
  Tensor host(const std::string& name) const { return counted(ck.tensor(name)); }
  Tensor vector(const std::string& name) const { return backend.upload(host(name), WeightRole::Vector); }
  LinearWeights linear(const std::string& p, bool bias) const {
    const Tensor b = bias ? host(p + ".bias") : Tensor();
    return backend.upload_linear(host(p + ".weight"), bias ? &b : nullptr);
  }
  NormWeights norm(const std::string& p, bool bias) const {
    return {vector(p + ".weight"), bias ? vector(p + ".bias") : Tensor()};
  }
  // Rows [begin, end) of a linear layer (one of q/k/v inside a fused projection).
  LinearWeights linear_rows(const std::string& p, int64_t begin, int64_t end) const {
    const Tensor b = counted(ck.tensor(p + ".bias").slice_rows(begin, end));
    return backend.upload_linear(counted(ck.tensor(p + ".weight").slice_rows(begin, end)), &b);
  }
  MergerWeights merger(const std::string& p) const {
    return {norm(p + ".norm", true), linear(p + ".linear_fc1", true), linear(p + ".linear_fc2", true)};
  }
};

}  // namespace

ModelWeights bind_weights(const ModelFolder& model, Backend& backend, const std::function<void(double)>& progress) {
  const ModelConfig& c = model.config;
  const Binder b{model.checkpoint, backend, progress};
  ModelWeights w;

  const std::string vis = "model.visual.";
  const Tensor conv = b.host(vis + "patch_embed.proj.weight");
  const Tensor conv_bias = b.host(vis + "patch_embed.proj.bias");
  w.vision.patch_embed = backend.upload_linear(conv.reshaped({c.vision.hidden_size, c.vision.patch_dim()}), &conv_bias);
  w.vision.position_table = b.host(vis + "pos_embed.weight").to(DType::F32);  // widened once, not per image
  const int64_t h = c.vision.hidden_size;
  for (int64_t i = 0; i < c.vision.depth; ++i) {
    const std::string p = vis + "blocks." + std::to_string(i) + ".";
    w.vision.blocks.push_back({b.norm(p + "norm1", true), b.norm(p + "norm2", true),
                               b.linear_rows(p + "attn.qkv", 0, h), b.linear_rows(p + "attn.qkv", h, 2 * h),
                               b.linear_rows(p + "attn.qkv", 2 * h, 3 * h), b.linear(p + "attn.proj", true),
                               b.linear(p + "mlp.linear_fc1", true), b.linear(p + "mlp.linear_fc2", true)});
  }
  w.vision.merger = b.merger(vis + "merger");
  for (std::size_t k = 0; k < c.vision.deepstack_visual_indexes.size(); ++k)
    w.vision.deepstack.push_back(b.merger(vis + "deepstack_merger_list." + std::to_string(k)));

  const std::string lm = "model.language_model.";
  const bool bias = c.text.attention_bias;
  w.text.embed_tokens = backend.upload(b.host(lm + "embed_tokens.weight"), WeightRole::EmbeddingTable);
  for (int64_t l = 0; l < c.text.num_hidden_layers; ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    w.text.layers.push_back({b.norm(p + "input_layernorm", false), b.norm(p + "post_attention_layernorm", false),
                             b.norm(p + "self_attn.q_norm", false), b.norm(p + "self_attn.k_norm", false),
                             b.linear(p + "self_attn.q_proj", bias), b.linear(p + "self_attn.k_proj", bias),
                             b.linear(p + "self_attn.v_proj", bias), b.linear(p + "self_attn.o_proj", bias),
                             b.linear(p + "mlp.gate_proj", false), b.linear(p + "mlp.up_proj", false),
                             b.linear(p + "mlp.down_proj", false)});
  }
  w.text.final_norm = b.norm(lm + "norm", false);
  // Tied checkpoints use the embedding as the output head even when an lm_head.weight is present (transformers).
  w.text.lm_head = c.tie_word_embeddings ? LinearWeights::of(w.text.embed_tokens) : b.linear("lm_head", false);
  if (progress) progress(1.0);
  return w;
}

}  // namespace qvl
