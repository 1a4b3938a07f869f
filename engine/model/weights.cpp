#include "model/weights.h"

#include <algorithm>
#include <array>

#include <map>

#include "backend/quantize.h"
#include "core/error.h"
#include "io/tensor_layout.h"

namespace qvl {

namespace {

struct Binder {
  const ModelFolder& model;
  Backend* backend;  // where the part being bound goes
  const std::optional<QuantizationConfig>& quantise;  // at load; the folder's own quantisation is model.config's
  const std::function<void(double)>& progress;
  std::map<std::string, TensorSpec> specs;  // the unquantised shapes, by name
  mutable uint64_t bytes_done = 0;

  Tensor counted(Tensor t) const {
    bytes_done += uint64_t(t.nbytes());
    if (progress) progress(std::min(1.0, double(bytes_done) / double(std::max<uint64_t>(1, model.checkpoint.total_bytes()))));
    return t;
  }
  Tensor host(const std::string& name) const { return counted(model.checkpoint.tensor(name)); }
  Tensor vector(const std::string& name) const { return backend->upload(host(name), WeightRole::Vector); }
  NormWeights norm(const std::string& p, bool bias) const {
    return {vector(p + ".weight"), bias ? vector(p + ".bias") : Tensor()};
  }
  // The matrix `name` (its rows [begin, end) when end >= 0: q, k or v of a fused projection) with `bias`, as a unit:
  // as the folder stores it (quantised there, or float), or quantised here when the policy says so.
  LinearWeights unit(const std::string& name, Tensor bias, WeightRole role = WeightRole::Matrix, int64_t begin = 0,
                     int64_t end = -1) const {
    return backend->upload_linear(host_unit(name, std::move(bias), begin, end), role);
  }
  LinearWeights host_unit(const std::string& name, Tensor bias, int64_t begin = 0, int64_t end = -1) const {
    const TensorSpec& spec = specs.at(name);
    const int64_t in = shape_numel(spec.shape) / spec.shape[0];
    const auto rows = [&](Tensor t) { return end < 0 ? t : t.slice_rows(begin, end); };
    if (model.config.quantization)
      if (const auto as = quantised_as(spec, *model.config.quantization))
        return LinearWeights::quantised_of(as->format, as->group, in, counted(rows(model.checkpoint.tensor(name))),
                                           counted(rows(model.checkpoint.tensor(scale_name(name)))), std::move(bias));
    Tensor matrix = counted(rows(model.checkpoint.tensor(name)));
    matrix = matrix.reshaped({matrix.dim(0), in});  // the patch embedding's Conv3d as [hidden, C·T·P·P]
    if (quantise)
      if (const auto as = quantised_as(spec, *quantise)) {
        LinearWeights q = quantize_matrix(matrix, as->format, as->group, name);
        q.bias = std::move(bias);
        return q;
      }
    return LinearWeights::of(std::move(matrix), std::move(bias));
  }
  // Projections one product reads together (q, k and v; gate and up), uploaded together (Backend::upload_linears).
  std::vector<LinearWeights> linears(const std::vector<std::string>& prefixes, bool bias) const {
    std::vector<LinearWeights> host;
    for (const std::string& p : prefixes) host.push_back(host_unit(p + ".weight", bias ? this->host(p + ".bias") : Tensor()));
    return backend->upload_linears(host);
  }
  LinearWeights linear(const std::string& p, bool bias) const {
    return unit(p + ".weight", bias ? host(p + ".bias") : Tensor());
  }
  LinearWeights linear_rows(const std::string& p, int64_t begin, int64_t end) const {
    return unit(p + ".weight", counted(model.checkpoint.tensor(p + ".bias").slice_rows(begin, end)), WeightRole::Matrix,
                begin, end);
  }
  MergerWeights merger(const std::string& p) const {
    return {norm(p + ".norm", true), linear(p + ".linear_fc1", true), linear(p + ".linear_fc2", true)};
  }
};

// The quantised --weights choices, by QuantizationConfig::name(): "q8", "q8-g32", "q4", "q4-g64", "q4-g128".
constexpr std::array<QuantizationConfig, 5> kQuantisedChoices{{{WeightFormat::Q8, 128, WeightFormat::Q8},
                                                               {WeightFormat::Q8, 32, WeightFormat::Q8},
                                                               {WeightFormat::Q4, 32, WeightFormat::Q8},
                                                               {WeightFormat::Q4, 64, WeightFormat::Q8},
                                                               {WeightFormat::Q4, 128, WeightFormat::Q8}}};

}  // namespace

std::string WeightPolicy::quantised_names() {
  std::string names;
  for (const QuantizationConfig& q : kQuantisedChoices) names += (names.empty() ? "" : ", ") + q.name();
  return names;
}

WeightPolicy WeightPolicy::from_name(std::string_view name) {
  WeightPolicy p;
  p.name = std::string(name);
  if (name == "bf16") return p;
  for (const QuantizationConfig& q : kQuantisedChoices)
    if (name == q.name()) {
      p.quantise = q;
      return p;
    }
  fail("weights \"", name, "\": choose bf16 (as the checkpoint stores them), q8 or q4 (every choice: ", quantised_names(),
       "; -gN: groups of N)");
}

WeightPlacement WeightPlacement::all_on(Backend& backend, const ModelConfig& config) {
  return {&backend, &backend, std::vector<Backend*>(std::size_t(config.text.num_hidden_layers), &backend)};
}

ModelWeights bind_weights(const ModelFolder& model, Backend& backend, const WeightPolicy& policy,
                          const std::function<void(double)>& progress) {
  return bind_weights(model, WeightPlacement::all_on(backend, model.config), policy, progress);
}

ModelWeights bind_weights(const ModelFolder& model, const WeightPlacement& placement, const WeightPolicy& policy,
                          const std::function<void(double)>& progress) {
  const ModelConfig& c = model.config;
  if (c.quantization && policy.quantise && *policy.quantise != *c.quantization) {
    const auto grouping = [](const QuantizationConfig& q) {
      return std::string(format_traits(q.matrices).name) + " in groups of " + std::to_string(q.group);
    };
    fail(model.dir.string(), " holds ", c.quantization->name(), " weights (", grouping(*c.quantization),
         ", written by qvl quantize): --weights bf16 or ", c.quantization->name(), " uses them as they are, --weights ",
         policy.name, " (", grouping(*policy.quantise), ") would quantise them twice");
  }
  if (!placement.vision || !placement.head || placement.layers.size() != std::size_t(c.text.num_hidden_layers))
    fail("bind_weights: the placement names no backend for some part of the model");
  Binder b{model, placement.vision, policy.quantise, progress, {}};
  for (TensorSpec& spec : expected_tensors(c)) b.specs.emplace(spec.name, std::move(spec));
  ModelWeights w;

  const std::string vis = "model.visual.";
  w.vision.patch_embed = b.unit(vis + "patch_embed.proj.weight", b.host(vis + "patch_embed.proj.bias"));
  w.vision.position_table = b.vector(vis + "pos_embed.weight");
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
  b.backend = placement.head;
  w.text.embed_tokens = b.unit(lm + "embed_tokens.weight", Tensor(), WeightRole::EmbeddingTable);
  for (int64_t l = 0; l < c.text.num_hidden_layers; ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    b.backend = placement.layers[std::size_t(l)];
    NormWeights input_norm = b.norm(p + "input_layernorm", false), post_norm = b.norm(p + "post_attention_layernorm", false),
                q_norm = b.norm(p + "self_attn.q_norm", false), k_norm = b.norm(p + "self_attn.k_norm", false);
    std::vector<LinearWeights> qkv = b.linears({p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"}, bias);
    LinearWeights o = b.linear(p + "self_attn.o_proj", bias);
    std::vector<LinearWeights> gate_up = b.linears({p + "mlp.gate_proj", p + "mlp.up_proj"}, false);
    LinearWeights down = b.linear(p + "mlp.down_proj", false);
    w.text.layers.push_back({input_norm, post_norm, q_norm, k_norm, qkv[0], qkv[1], qkv[2], o, gate_up[0], gate_up[1], down});
  }
  b.backend = placement.head;
  w.text.final_norm = b.norm(lm + "norm", false);
  // Tied checkpoints use the embedding as the output head even when an lm_head.weight is present (transformers).
  w.text.lm_head = c.tie_word_embeddings ? w.text.embed_tokens : b.unit("lm_head.weight", Tensor());
  if (progress) progress(1.0);
  return w;
}

}  // namespace qvl
