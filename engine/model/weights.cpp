#include "model/weights.h"

#include <algorithm>

#include "backend/quantize.h"
#include "core/error.h"

namespace qvl {

namespace {

struct Binder {
  const Checkpoint& ck;
  Backend& backend;
  const WeightPolicy& policy;
  const std::function<void(double)>& progress;
  mutable uint64_t bytes_done = 0;
  Tensor counted(Tensor t) const {
    bytes_done += uint64_t(t.nbytes());
    if (progress) progress(std::min(1.0, double(bytes_done) / double(std::max<uint64_t>(1, ck.total_bytes()))));
    return t;
  }
  Tensor host(const std::string& name) const { return counted(ck.tensor(name)); }
  Tensor vector(const std::string& name) const { return backend.upload(host(name), WeightRole::Vector); }
  // A linear layer in the policy's format for matrices (quantised here, on the host, unless it stays as stored).
  LinearWeights unit(const std::string& name, const Tensor& weight, Tensor bias) const {
    if (!policy.matrices) return backend.upload_linear(LinearWeights::of(weight, std::move(bias)));
    LinearWeights q = quantize_matrix(weight, *policy.matrices, policy.group, name);
    q.bias = std::move(bias);
    return backend.upload_linear(q);
  }
  LinearWeights linear(const std::string& p, bool bias) const {
    return unit(p + ".weight", host(p + ".weight"), bias ? host(p + ".bias") : Tensor());
  }
  // The embedding table (or an untied output head) in the policy's embedding format.
  LinearWeights table(const std::string& name, WeightRole role) const {
    const Tensor t = host(name);
    if (!policy.embedding) return backend.upload_linear(LinearWeights::of(t), role);
    return backend.upload_linear(quantize_matrix(t, *policy.embedding, kQuantBlock, name), role);
  }
  NormWeights norm(const std::string& p, bool bias) const {
    return {vector(p + ".weight"), bias ? vector(p + ".bias") : Tensor()};
  }
  // Rows [begin, end) of a linear layer (one of q/k/v inside a fused projection).
  LinearWeights linear_rows(const std::string& p, int64_t begin, int64_t end) const {
    return unit(p + ".weight", counted(ck.tensor(p + ".weight").slice_rows(begin, end)),
                counted(ck.tensor(p + ".bias").slice_rows(begin, end)));
  }
  MergerWeights merger(const std::string& p) const {
    return {norm(p + ".norm", true), linear(p + ".linear_fc1", true), linear(p + ".linear_fc2", true)};
  }
};

}  // namespace

WeightPolicy WeightPolicy::from_name(std::string_view name) {
  WeightPolicy p;
  p.name = std::string(name);
  if (name == "bf16") return p;
  if (name == "q8") {
    p.matrices = p.embedding = WeightFormat::Q8;
    p.group = kQuantBlock;
    return p;
  }
  for (const int64_t group : {32, 64, 128})
    if (name == "q4" + (group == 32 ? std::string() : "-g" + std::to_string(group))) {
      p.matrices = WeightFormat::Q4;
      p.embedding = WeightFormat::Q8;
      p.group = group;
      return p;
    }
  fail("weights \"", name, "\": choose bf16 (as the checkpoint stores them), q8 or q4 (q4-g64, q4-g128: larger groups)");
}

ModelWeights bind_weights(const ModelFolder& model, Backend& backend, const WeightPolicy& policy,
                          const std::function<void(double)>& progress) {
  const ModelConfig& c = model.config;
  const Binder b{model.checkpoint, backend, policy, progress};
  ModelWeights w;

  const std::string vis = "model.visual.";
  const std::string conv = vis + "patch_embed.proj.weight";
  w.vision.patch_embed = b.unit(conv, b.host(conv).reshaped({c.vision.hidden_size, c.vision.patch_dim()}),
                                b.host(vis + "patch_embed.proj.bias"));
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
  w.text.embed_tokens = b.table(lm + "embed_tokens.weight", WeightRole::EmbeddingTable);
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
  w.text.lm_head = c.tie_word_embeddings ? w.text.embed_tokens : b.table("lm_head.weight", WeightRole::Matrix);
  if (progress) progress(1.0);
  return w;
}

}  // namespace qvl
