#include "io/model_config.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/limits.h"
#include "io/json_fields.h"
#include "io/tensor_layout.h"

namespace qvl {
namespace {

void require(bool ok, const JsonFields& f, const std::string& key, const std::string& message) {
  if (!ok) fail(f.where(key), ": ", message);
}

// The integer sizes of each config, listed once: read (required, or optional with the struct's default), checked
// (positive, at most the field's limit) and written by the same loops. The limits are qvl's, far above any released
// Qwen3-VL (the 8B: 36 layers, hidden 4096, vocabulary 151,936): a config of a few bytes must not make the engine
// allocate gigabytes (num_hidden_layers: 1000000 took 5 GB before failing).
template <typename Config> struct SizeField {
  const char* key;
  int64_t Config::*member;
  bool required;
  int64_t max;
};
constexpr int64_t kMaxWidth = limits::kModelWidth, kMaxCount = limits::kModelCount;
constexpr SizeField<TextConfig> kTextSizes[] = {
    {"vocab_size", &TextConfig::vocab_size, true, limits::kVocabulary},
    {"hidden_size", &TextConfig::hidden_size, true, kMaxWidth},
    {"intermediate_size", &TextConfig::intermediate_size, true, 4 * kMaxWidth},
    {"num_hidden_layers", &TextConfig::num_hidden_layers, true, kMaxCount},
    {"num_attention_heads", &TextConfig::num_attention_heads, true, kMaxCount},
    {"num_key_value_heads", &TextConfig::num_key_value_heads, false, kMaxCount},  // default: num_attention_heads
    {"head_dim", &TextConfig::head_dim, false, limits::kHeadDim},
    {"max_position_embeddings", &TextConfig::max_position_embeddings, false, limits::kPositions},
};
constexpr SizeField<VisionConfig> kVisionSizes[] = {
    {"depth", &VisionConfig::depth, true, kMaxCount},
    {"hidden_size", &VisionConfig::hidden_size, true, kMaxWidth},
    {"intermediate_size", &VisionConfig::intermediate_size, true, 4 * kMaxWidth},
    {"num_heads", &VisionConfig::num_heads, true, kMaxCount},
    {"out_hidden_size", &VisionConfig::out_hidden_size, true, kMaxWidth},
    {"in_channels", &VisionConfig::in_channels, false, limits::kPatchFactor},
    {"patch_size", &VisionConfig::patch_size, false, limits::kPatchSize},
    {"temporal_patch_size", &VisionConfig::temporal_patch_size, false, limits::kPatchFactor},
    {"spatial_merge_size", &VisionConfig::spatial_merge_size, false, limits::kPatchFactor},
    {"num_position_embeddings", &VisionConfig::num_position_embeddings, false, limits::kVisionPositions},
};
// The special tokens (top level): optional, each inside the vocabulary.
constexpr SizeField<ModelConfig> kTokenIds[] = {
    {"image_token_id", &ModelConfig::image_token_id, false, limits::kVocabulary},
    {"video_token_id", &ModelConfig::video_token_id, false, limits::kVocabulary},
    {"vision_start_token_id", &ModelConfig::vision_start_token_id, false, limits::kVocabulary},
    {"vision_end_token_id", &ModelConfig::vision_end_token_id, false, limits::kVocabulary},
};

template <typename Config, std::size_t N>
void read_fields(const JsonFields& f, const SizeField<Config> (&fields)[N], Config& c) {
  for (const auto& field : fields)
    c.*field.member = field.required ? f.required<int64_t>(field.key) : f.optional<int64_t>(field.key, c.*field.member);
}
template <typename Config, std::size_t N>
void check_sizes(const JsonFields& f, const SizeField<Config> (&fields)[N], const Config& c) {
  for (const auto& field : fields) {
    const int64_t v = c.*field.member;
    require(v > 0, f, field.key, "must be a positive integer, got " + std::to_string(v));
    require(v <= field.max, f, field.key,
            "is " + std::to_string(v) + ", over qvl's limit of " + std::to_string(field.max));
  }
}
template <typename Config, std::size_t N>
void write_fields(nlohmann::json& j, const SizeField<Config> (&fields)[N], const Config& c) {
  for (const auto& field : fields) j[field.key] = c.*field.member;
}

// rope_theta and the mrope layout: `rope_parameters` (5.x) or `rope_theta` + `rope_scaling` (4.57).
std::string rope_key(const JsonFields& t) { return t.has("rope_parameters") ? "rope_parameters" : "rope_scaling"; }

void read_rope(const JsonFields& t, TextConfig& text) {
  const std::string key = rope_key(t);
  text.rope_theta = t.optional<double>("rope_theta", text.rope_theta);
  if (!t.has(key)) return;
  const JsonFields rope = t.object(key);
  const std::string type = rope.has("rope_type") ? rope.required<std::string>("rope_type")
                                                 : rope.optional<std::string>("type", "default");
  // Only the plain rope of the released checkpoints; YaRN and friends would silently change every position.
  require(type == "default" || type == "mrope", rope, "rope_type", "'" + type + "' is not supported (only 'default')");
  text.rope_theta = rope.optional<double>("rope_theta", text.rope_theta);
  text.mrope_section = rope.optional<std::vector<int64_t>>("mrope_section", text.mrope_section);
  text.mrope_interleaved = rope.optional<bool>("mrope_interleaved", text.mrope_interleaved);
}

void validate_text(const JsonFields& t, const TextConfig& c, const std::string& rope_field) {
  check_sizes(t, kTextSizes, c);
  require(c.num_attention_heads % c.num_key_value_heads == 0, t, "num_key_value_heads",
          "must divide num_attention_heads (" + std::to_string(c.num_attention_heads) + ")");
  require(c.head_dim % 2 == 0, t, "head_dim", "must be even (rotary pairs)");
  require(c.hidden_act == "silu", t, "hidden_act", "only 'silu' is supported, got '" + c.hidden_act + "'");
  require(c.rms_norm_eps > 0, t, "rms_norm_eps", "must be positive");
  require(c.rope_theta > 1, t, "rope_theta", "must be greater than 1");
  const std::string mk = rope_field + ".mrope_section";
  require(c.mrope_section.size() == 3, t, mk, "must list 3 sections (t, h, w)");
  require(std::all_of(c.mrope_section.begin(), c.mrope_section.end(), [](int64_t s) { return s >= 0; }), t, mk,
          "sections must be non-negative");
  const int64_t sum = std::accumulate(c.mrope_section.begin(), c.mrope_section.end(), int64_t(0));
  require(sum == c.head_dim / 2, t, mk,
          "sections sum to " + std::to_string(sum) + " but head_dim / 2 is " + std::to_string(c.head_dim / 2));
  // Interleaved layout: h takes frequencies 1, 4, 7, ... and w takes 2, 5, 8, ...; all must exist.
  const int64_t frequencies = c.head_dim / 2;
  require((c.mrope_section[1] == 0 || 3 * c.mrope_section[1] - 2 < frequencies) &&
              (c.mrope_section[2] == 0 || 3 * c.mrope_section[2] - 1 < frequencies),
          t, mk, "h/w sections are too large for the interleaved layout");
}

void validate_vision(const JsonFields& v, const VisionConfig& c, const TextConfig& text) {
  check_sizes(v, kVisionSizes, c);
  require(c.hidden_size % c.num_heads == 0, v, "num_heads", "must divide hidden_size");
  require(c.head_dim() % 4 == 0, v, "num_heads", "the head size must be a multiple of 4 (2D rotary halves)");
  const auto side = int64_t(std::llround(std::sqrt(double(c.num_position_embeddings))));
  require(side * side == c.num_position_embeddings, v, "num_position_embeddings", "must be a square number");
  require(c.out_hidden_size == text.hidden_size, v, "out_hidden_size",
          "must equal text_config.hidden_size (" + std::to_string(text.hidden_size) + ")");
  require(c.hidden_act == "gelu_pytorch_tanh", v, "hidden_act", "only 'gelu_pytorch_tanh' is supported");
  std::set<int64_t> seen;
  for (int64_t i : c.deepstack_visual_indexes) {
    require(i >= 0 && i < c.depth, v, "deepstack_visual_indexes", "index " + std::to_string(i) + " is not a block");
    require(seen.insert(i).second, v, "deepstack_visual_indexes", "index " + std::to_string(i) + " appears twice");
  }
  require(int64_t(c.deepstack_visual_indexes.size()) <= text.num_hidden_layers, v, "deepstack_visual_indexes",
          "more deepstack features than decoder layers");
}

std::string dtype_to_torch(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    default: return "bfloat16";
  }
}

}  // namespace

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  const JsonFields top(j, source);
  ModelConfig c;
  if (top.has("model_type")) {
    const auto type = top.required<std::string>("model_type");
    require(type == "qwen3_vl", top, "model_type", "expected 'qwen3_vl', got '" + type + "'");
  }
  const JsonFields t = top.object("text_config");
  TextConfig& text = c.text;
  read_fields(t, kTextSizes, text);
  if (!t.has("num_key_value_heads")) text.num_key_value_heads = text.num_attention_heads;
  text.rms_norm_eps = t.optional<double>("rms_norm_eps", text.rms_norm_eps);
  text.hidden_act = t.optional<std::string>("hidden_act", text.hidden_act);
  text.attention_bias = t.optional<bool>("attention_bias", text.attention_bias);
  read_rope(t, text);
  validate_text(t, text, rope_key(t));

  const JsonFields v = top.object("vision_config");
  VisionConfig& vision = c.vision;
  read_fields(v, kVisionSizes, vision);
  vision.deepstack_visual_indexes = v.optional<std::vector<int64_t>>("deepstack_visual_indexes", vision.deepstack_visual_indexes);
  vision.hidden_act = v.optional<std::string>("hidden_act", vision.hidden_act);
  if (v.has("rope_parameters")) vision.rope_theta = v.object("rope_parameters").optional<double>("rope_theta", vision.rope_theta);
  validate_vision(v, vision, text);

  read_fields(top, kTokenIds, c);
  for (const auto& field : kTokenIds) {
    const int64_t id = c.*field.member;
    require(id >= 0 && id < text.vocab_size, top, field.key, "token id " + std::to_string(id) + " is outside the vocabulary");
  }
  // transformers reads the top-level flag; older files only set it in text_config.
  c.tie_word_embeddings = top.has("tie_word_embeddings") ? top.required<bool>("tie_word_embeddings")
                                                          : t.optional<bool>("tie_word_embeddings", false);
  const std::string dtype_key = top.has("dtype") ? "dtype" : "torch_dtype";
  const std::string dtype_name = top.has(dtype_key) ? top.required<std::string>(dtype_key)
                                                     : t.optional<std::string>(dtype_key, "bfloat16");
  if (dtype_name == "float32") c.dtype = DType::F32;
  else if (dtype_name == "float16") c.dtype = DType::F16;
  else if (dtype_name == "bfloat16") c.dtype = DType::BF16;
  else fail(top.where(dtype_key), ": unsupported dtype '", dtype_name, "'");
  if (top.has("quantization_config"))  // object() refuses anything but an object, naming the field
    c.quantization = QuantizationConfig::from_json(top.object("quantization_config").json(), source);
  return c;
}

std::string QuantizationConfig::name() const {
  std::string name(format_traits(matrices).name);
  if (group != default_group(matrices)) name += "-g" + std::to_string(group);
  if (embedding != WeightFormat::Q8) name += "-embedding-" + std::string(format_traits(embedding).name);
  return name;
}

nlohmann::json QuantizationConfig::to_json() const {
  return {{"quant_method", "qvl"},
          {"weights", std::string(format_traits(matrices).name)},
          {"group_size", group},
          {"embedding", std::string(format_traits(embedding).name)},
          {"embedding_group_size", kQuantBlock}};
}

QuantizationConfig QuantizationConfig::from_json(const nlohmann::json& j, const std::string& source) {
  const JsonFields f(j, source, "quantization_config.");
  const auto method = f.required<std::string>("quant_method");
  require(method == "qvl", f, "quant_method",
          "'" + method + "' is not read by qvl (it reads the q8/q4 folders qvl quantize writes)");
  QuantizationConfig q;
  const auto format = [&](const std::string& key) {
    const auto name = f.required<std::string>(key);
    const auto fmt = format_from_name(name);
    require(fmt && format_traits(*fmt).quantised, f, key, "expected q8 or q4, got '" + name + "'");
    return *fmt;
  };
  q.matrices = format("weights");
  q.embedding = format("embedding");
  q.group = f.required<int64_t>("group_size");
  try {
    check_group(q.matrices, q.group);
  } catch (const Error& e) {
    fail(f.where("group_size"), ": ", e.what());
  }
  require(f.optional<int64_t>("embedding_group_size", kQuantBlock) == kQuantBlock, f, "embedding_group_size",
          "the embedding is quantised in groups of 32");
  return q;
}

ModelConfig ModelConfig::load(const std::filesystem::path& path) {
  return from_json(read_json_file(path, limits::kConfigFileBytes), path.string());
}

nlohmann::json ModelConfig::to_json() const {
  using nlohmann::json;
  json text_json = {
      {"model_type", "qwen3_vl_text"},
      {"rms_norm_eps", text.rms_norm_eps},
      {"rope_theta", text.rope_theta},
      {"rope_scaling", {{"rope_type", "default"}, {"mrope_section", text.mrope_section}, {"mrope_interleaved", text.mrope_interleaved}}},
      {"hidden_act", text.hidden_act},
      {"attention_bias", text.attention_bias},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"tie_word_embeddings", tie_word_embeddings},
      {"bos_token_id", 151643},
      {"eos_token_id", 151645},
      {"dtype", dtype_to_torch(dtype)},
  };
  json vision_json = {
      {"model_type", "qwen3_vl"},
      {"deepstack_visual_indexes", vision.deepstack_visual_indexes},
      {"hidden_act", vision.hidden_act},
      {"initializer_range", 0.02},
  };
  write_fields(text_json, kTextSizes, text);
  write_fields(vision_json, kVisionSizes, vision);
  json j = {
      {"architectures", {"Qwen3VLForConditionalGeneration"}},
      {"model_type", "qwen3_vl"},
      {"text_config", text_json},
      {"vision_config", vision_json},
      {"tie_word_embeddings", tie_word_embeddings},
      {"dtype", dtype_to_torch(dtype)},
      {"transformers_version", "4.57.0"},
  };
  write_fields(j, kTokenIds, *this);
  if (quantization) j["quantization_config"] = quantization->to_json();
  return j;
}

int64_t ModelConfig::parameter_count() const {
  int64_t n = 0;
  for (const auto& spec : expected_tensors(*this)) n += shape_numel(spec.shape);
  return n;
}

GenerationConfig GenerationConfig::from_json(const nlohmann::json& j, const std::string& source) {
  const JsonFields f(j, source);
  GenerationConfig g;
  g.eos_token_ids = f.optional<std::vector<int64_t>>("eos_token_id", g.eos_token_ids);
  g.pad_token_id = f.optional<int64_t>("pad_token_id", g.pad_token_id);
  g.bos_token_id = f.optional<int64_t>("bos_token_id", g.bos_token_id);
  g.do_sample = f.optional<bool>("do_sample", false);  // transformers' GenerationConfig default
  g.temperature = f.optional<double>("temperature", 1.0);
  g.top_k = f.optional<int64_t>("top_k", 50);
  g.top_p = f.optional<double>("top_p", 1.0);
  g.repetition_penalty = f.optional<double>("repetition_penalty", 1.0);
  g.max_new_tokens = f.optional<int64_t>("max_new_tokens", 0);
  require(!g.eos_token_ids.empty(), f, "eos_token_id", "must name at least one token");
  for (const int64_t id : g.eos_token_ids)  // an id no token has never ends an answer
    require(id >= 0 && id < limits::kVocabulary, f, "eos_token_id",
            "holds " + std::to_string(id) + ", not a token id (0 to " + std::to_string(limits::kVocabulary - 1) + ")");
  require(g.temperature >= 0, f, "temperature", "must not be negative");
  require(g.top_k >= 0, f, "top_k", "must not be negative");
  require(g.top_p > 0 && g.top_p <= 1, f, "top_p", "must be in (0, 1]");
  require(g.repetition_penalty > 0, f, "repetition_penalty", "must be positive");
  require(g.max_new_tokens >= 0, f, "max_new_tokens", "must not be negative");
  return g;
}

GenerationConfig GenerationConfig::load(const std::filesystem::path& path) {
  return from_json(read_json_file(path, limits::kConfigFileBytes), path.string());
}

GenerationConfig GenerationConfig::load_or_default(const std::filesystem::path& path) {
  return std::filesystem::exists(path) ? load(path) : from_json(nlohmann::json::object(), path.string());
}

nlohmann::json GenerationConfig::to_json() const {
  nlohmann::json j = {{"bos_token_id", bos_token_id}, {"pad_token_id", pad_token_id}, {"eos_token_id", eos_token_ids},
                      {"do_sample", do_sample},       {"temperature", temperature},   {"top_k", top_k},
                      {"top_p", top_p},               {"repetition_penalty", repetition_penalty}};
  if (max_new_tokens > 0) j["max_new_tokens"] = max_new_tokens;
  return j;
}

PreprocessorConfig PreprocessorConfig::from_json(const nlohmann::json& j, const std::string& source) {
  const JsonFields f(j, source);
  PreprocessorConfig p;
  if (f.has("size")) {
    const JsonFields size = f.object("size");
    p.min_pixels = size.optional<int64_t>("shortest_edge", p.min_pixels);
    p.max_pixels = size.optional<int64_t>("longest_edge", p.max_pixels);
  }
  // Qwen2-VL era spelling; when present transformers lets it override `size`.
  p.min_pixels = f.optional<int64_t>("min_pixels", p.min_pixels);
  p.max_pixels = f.optional<int64_t>("max_pixels", p.max_pixels);
  p.patch_size = f.optional<int64_t>("patch_size", p.patch_size);
  p.temporal_patch_size = f.optional<int64_t>("temporal_patch_size", p.temporal_patch_size);
  p.merge_size = f.optional<int64_t>("merge_size", p.merge_size);
  p.image_mean = f.optional<std::vector<double>>("image_mean", p.image_mean);
  p.image_std = f.optional<std::vector<double>>("image_std", p.image_std);
  p.rescale_factor = f.optional<double>("rescale_factor", p.rescale_factor);
  p.resample = f.optional<int64_t>("resample", p.resample);
  p.do_resize = f.optional<bool>("do_resize", p.do_resize);
  p.do_rescale = f.optional<bool>("do_rescale", p.do_rescale);
  p.do_normalize = f.optional<bool>("do_normalize", p.do_normalize);
  p.do_convert_rgb = f.optional<bool>("do_convert_rgb", p.do_convert_rgb);
  require(p.min_pixels > 0, f, "size.shortest_edge", "must be positive");
  constexpr int64_t kMaxPixels = limits::kImagePixelBudget;
  require(p.max_pixels <= kMaxPixels, f, "size.longest_edge",
          "is " + std::to_string(p.max_pixels) + " pixels, over qvl's limit of " + std::to_string(kMaxPixels));
  require(p.max_pixels >= p.min_pixels, f, "size.longest_edge", "must be at least size.shortest_edge");
  require(p.patch_size > 0 && p.merge_size > 0 && p.temporal_patch_size > 0, f, "patch_size",
          "patch_size, merge_size and temporal_patch_size must be positive");
  // Bounded like the vision config's fields, before any product of them (the fuzzer's 544648200192 overflowed).
  require(p.patch_size <= limits::kPatchSize, f, "patch_size", "is over qvl's limit of " + std::to_string(limits::kPatchSize));
  require(p.merge_size <= limits::kPatchFactor && p.temporal_patch_size <= limits::kPatchFactor, f, "merge_size",
          "merge_size and temporal_patch_size are over qvl's limit of " + std::to_string(limits::kPatchFactor));
  require(p.image_mean.size() == 3, f, "image_mean", "must have 3 values");
  require(p.image_std.size() == 3 && std::all_of(p.image_std.begin(), p.image_std.end(), [](double s) { return s > 0; }),
          f, "image_std", "must have 3 positive values");
  require(p.resample == 3, f, "resample", "only 3 (bicubic) is supported");
  return p;
}

PreprocessorConfig PreprocessorConfig::load(const std::filesystem::path& path) {
  return from_json(read_json_file(path, limits::kConfigFileBytes), path.string());
}

nlohmann::json PreprocessorConfig::to_json() const {
  return {{"size", {{"shortest_edge", min_pixels}, {"longest_edge", max_pixels}}},
          {"patch_size", patch_size},
          {"temporal_patch_size", temporal_patch_size},
          {"merge_size", merge_size},
          {"image_mean", image_mean},
          {"image_std", image_std},
          {"rescale_factor", rescale_factor},
          {"resample", resample},
          {"do_resize", do_resize},
          {"do_rescale", do_rescale},
          {"do_normalize", do_normalize},
          {"do_convert_rgb", do_convert_rgb},
          {"image_processor_type", "Qwen2VLImageProcessorFast"},
          {"processor_class", "Qwen3VLProcessor"}};
}

}  // namespace qvl
