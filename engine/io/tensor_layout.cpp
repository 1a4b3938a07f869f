#include "io/tensor_layout.h"

namespace qvl {

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  auto add = [&](std::string name, Shape shape, TensorRole role) { specs.push_back({std::move(name), std::move(shape), role}); };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, bool bias) {
    add(prefix + ".weight", {out, in}, TensorRole::Linear);
    if (bias) add(prefix + ".bias", {out}, TensorRole::Bias);
  };
  auto layer_norm = [&](const std::string& prefix, int64_t width) {
    add(prefix + ".weight", {width}, TensorRole::NormWeight);
    add(prefix + ".bias", {width}, TensorRole::NormBias);
  };

  const TextConfig& t = c.text;
  const std::string lm = "model.language_model.";
  add(lm + "embed_tokens.weight", {t.vocab_size, t.hidden_size}, TensorRole::Embedding);
  const int64_t q_width = t.num_attention_heads * t.head_dim;
  const int64_t kv_width = t.num_key_value_heads * t.head_dim;
  for (int64_t l = 0; l < t.num_hidden_layers; ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {t.hidden_size}, TensorRole::NormWeight);
    linear(p + "self_attn.q_proj", q_width, t.hidden_size, t.attention_bias);
    linear(p + "self_attn.k_proj", kv_width, t.hidden_size, t.attention_bias);
    linear(p + "self_attn.v_proj", kv_width, t.hidden_size, t.attention_bias);
    linear(p + "self_attn.o_proj", t.hidden_size, q_width, t.attention_bias);
    add(p + "self_attn.q_norm.weight", {t.head_dim}, TensorRole::NormWeight);
    add(p + "self_attn.k_norm.weight", {t.head_dim}, TensorRole::NormWeight);
    add(p + "post_attention_layernorm.weight", {t.hidden_size}, TensorRole::NormWeight);
    linear(p + "mlp.gate_proj", t.intermediate_size, t.hidden_size, false);
    linear(p + "mlp.up_proj", t.intermediate_size, t.hidden_size, false);
    linear(p + "mlp.down_proj", t.hidden_size, t.intermediate_size, false);
  }
  add(lm + "norm.weight", {t.hidden_size}, TensorRole::NormWeight);
  if (!c.tie_word_embeddings) add("lm_head.weight", {t.vocab_size, t.hidden_size}, TensorRole::Linear);

  const VisionConfig& v = c.vision;
  const std::string vis = "model.visual.";
  add(vis + "patch_embed.proj.weight", {v.hidden_size, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size},
      TensorRole::PatchEmbed);
  add(vis + "patch_embed.proj.bias", {v.hidden_size}, TensorRole::Bias);
  add(vis + "pos_embed.weight", {v.num_position_embeddings, v.hidden_size}, TensorRole::PositionEmbedding);
  for (int64_t b = 0; b < v.depth; ++b) {
    const std::string p = vis + "blocks." + std::to_string(b) + ".";
    layer_norm(p + "norm1", v.hidden_size);
    layer_norm(p + "norm2", v.hidden_size);
    linear(p + "attn.qkv", 3 * v.hidden_size, v.hidden_size, true);
    linear(p + "attn.proj", v.hidden_size, v.hidden_size, true);
    linear(p + "mlp.linear_fc1", v.intermediate_size, v.hidden_size, true);
    linear(p + "mlp.linear_fc2", v.hidden_size, v.intermediate_size, true);
  }
  // The main merger normalises each patch before the 2x2 concat; the deepstack mergers normalise after it.
  layer_norm(vis + "merger.norm", v.hidden_size);
  linear(vis + "merger.linear_fc1", v.merged_dim(), v.merged_dim(), true);
  linear(vis + "merger.linear_fc2", v.out_hidden_size, v.merged_dim(), true);
  for (std::size_t k = 0; k < v.deepstack_visual_indexes.size(); ++k) {
    const std::string p = vis + "deepstack_merger_list." + std::to_string(k) + ".";
    layer_norm(p + "norm", v.merged_dim());
    linear(p + "linear_fc1", v.merged_dim(), v.merged_dim(), true);
    linear(p + "linear_fc2", v.out_hidden_size, v.merged_dim(), true);
  }
  return specs;
}

std::optional<QuantisedAs> quantised_as(const TensorSpec& spec, const QuantizationConfig& q) {
  if (spec.role == TensorRole::Embedding || spec.name == "lm_head.weight") return QuantisedAs{q.embedding, kQuantBlock};
  if (spec.role == TensorRole::Linear || spec.role == TensorRole::PatchEmbed) return QuantisedAs{q.matrices, q.group};
  return std::nullopt;
}

std::string scale_name(const std::string& weight_name) { return weight_name + "_scale"; }

std::vector<TensorSpec> stored_tensors(const ModelConfig& config) {
  std::vector<TensorSpec> specs = expected_tensors(config);
  if (!config.quantization) return specs;
  std::vector<TensorSpec> stored;
  for (TensorSpec& spec : specs) {
    const auto as = quantised_as(spec, *config.quantization);
    if (!as) {
      stored.push_back(std::move(spec));
      continue;
    }
    const WeightFormatTraits& t = format_traits(as->format);
    const int64_t rows = spec.shape[0], in = shape_numel(spec.shape) / rows;
    stored.push_back({scale_name(spec.name), {rows, t.groups(in, as->group)}, spec.role, DType::F16});
    stored.push_back({spec.name, {rows, t.row_bytes(in, as->group)}, spec.role, t.storage});
  }
  return stored;
}

}  // namespace qvl
