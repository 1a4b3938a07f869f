#include "io/random_model.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/half.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/staged_folder.h"
#include "io/tensor_layout.h"

namespace qvl {
namespace fs = std::filesystem;

namespace {

ModelConfig qwen3_vl(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads, bool tie, int64_t vision_depth,
                     int64_t vision_hidden, int64_t vision_intermediate, std::vector<int64_t> deepstack) {
  ModelConfig c;
  c.text.vocab_size = 151936;
  c.text.hidden_size = hidden;
  c.text.intermediate_size = intermediate;
  c.text.num_hidden_layers = layers;
  c.text.num_attention_heads = heads;
  c.text.num_key_value_heads = 8;
  c.text.head_dim = 128;
  c.text.max_position_embeddings = 262144;
  c.vision.depth = vision_depth;
  c.vision.hidden_size = vision_hidden;
  c.vision.intermediate_size = vision_intermediate;
  c.vision.num_heads = 16;
  c.vision.out_hidden_size = hidden;
  c.vision.deepstack_visual_indexes = std::move(deepstack);
  c.tie_word_embeddings = tie;
  return c;
}

// A model small enough to build in seconds and run anywhere, with every feature of the real one: GQA, DeepStack,
// interleaved mRoPE with uneven sections, tied embeddings and the real vocabulary.
ModelConfig demo_tiny() {
  ModelConfig c;
  c.text.vocab_size = 151936;
  c.text.hidden_size = 64;
  c.text.intermediate_size = 192;
  c.text.num_hidden_layers = 4;
  c.text.num_attention_heads = 4;
  c.text.num_key_value_heads = 2;
  c.text.head_dim = 16;
  c.text.max_position_embeddings = 32768;
  c.text.mrope_section = {4, 2, 2};
  c.vision.depth = 4;
  c.vision.hidden_size = 64;
  c.vision.intermediate_size = 128;
  c.vision.num_heads = 4;
  c.vision.out_hidden_size = 64;
  c.vision.deepstack_visual_indexes = {1, 2, 3};
  c.tie_word_embeddings = true;
  return c;
}

struct Preset {
  const char* name;
  ModelConfig (*make)();
};
const Preset kPresets[] = {
    {"qwen3-vl-2b", [] { return qwen3_vl(2048, 6144, 28, 16, true, 24, 1024, 4096, {5, 11, 17}); }},
    {"qwen3-vl-4b", [] { return qwen3_vl(2560, 9728, 36, 32, true, 24, 1024, 4096, {5, 11, 17}); }},
    {"qwen3-vl-8b", [] { return qwen3_vl(4096, 12288, 36, 32, false, 27, 1152, 4304, {8, 16, 24}); }},
    {"demo-tiny", demo_tiny},
};

// xoshiro256** seeded through splitmix64: fast, portable and identical on every platform (std::mt19937 is too, but
// std::*_distribution is not).
class Rng {
public:
  explicit Rng(uint64_t seed) {
    for (auto& s : state_) s = splitmix(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  // Uniform in [-1, 1).
  float symmetric() { return float(int64_t(next() >> 40) - (int64_t(1) << 23)) * 0x1p-23f; }

private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_[4];
};

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char ch : s) h = (h ^ uint8_t(ch)) * 0x100000001b3ull;
  return h;
}

// Values are centre + U(-1,1) * half_width; half_width = std * sqrt(3) gives the wanted standard deviation.
struct Distribution {
  float centre, half_width;
};

Distribution distribution_for(const TensorSpec& spec, const ModelConfig& c) {
  const float sqrt3 = std::sqrt(3.0f);
  switch (spec.role) {
    case TensorRole::Embedding: return {0.0f, sqrt3 * 3.0f / std::sqrt(float(c.text.hidden_size))};
    case TensorRole::Linear: return {0.0f, sqrt3 / std::sqrt(float(spec.shape[1]))};
    case TensorRole::PatchEmbed: return {0.0f, sqrt3 / std::sqrt(float(c.vision.patch_dim()))};
    case TensorRole::PositionEmbedding: return {0.0f, sqrt3 * 0.5f};
    case TensorRole::NormWeight: return {1.0f, sqrt3 * 0.1f};
    case TensorRole::Bias:
    case TensorRole::NormBias: return {0.0f, sqrt3 * 0.02f};
  }
  return {0.0f, 0.0f};
}

void write_tensor_data(SafetensorsWriter& writer, const TensorSpec& spec, const ModelConfig& config, DType dtype,
                       uint64_t seed) {
  Rng rng(seed ^ fnv1a(spec.name));
  const Distribution d = distribution_for(spec, config);
  constexpr std::size_t kChunk = 1 << 16;
  std::vector<float> values(kChunk);
  std::vector<std::byte> encoded(kChunk * dtype_size(dtype));
  for (int64_t done = 0, total = shape_numel(spec.shape); done < total;) {
    const std::size_t n = std::size_t(std::min<int64_t>(kChunk, total - done));
    for (std::size_t i = 0; i < n; ++i) values[i] = d.centre + d.half_width * rng.symmetric();
    convert_elements(DType::F32, values.data(), dtype, encoded.data(), n);
    writer.append(encoded.data(), n * dtype_size(dtype));
    done += int64_t(n);
  }
}

void write_checkpoint(const ModelConfig& config, const fs::path& dir, const RandomModelOptions& options) {
  const auto specs = expected_tensors(config);
  const std::size_t element = dtype_size(options.dtype);
  // Group tensors into shards in order; a tensor larger than the limit gets a shard of its own.
  std::vector<std::vector<const TensorSpec*>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& spec : specs) {
    const uint64_t bytes = uint64_t(shape_numel(spec.shape)) * element;
    if (options.max_shard_bytes && shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&spec);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  if (shards.size() == 1) {
    SafetensorsWriter writer(dir / "model.safetensors", metadata);
    for (const auto* spec : shards[0]) writer.declare(spec->name, options.dtype, spec->shape);
    for (const auto* spec : shards[0]) write_tensor_data(writer, *spec, config, options.dtype, options.seed);
    writer.finish();
    return;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (std::size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    SafetensorsWriter writer(dir / name, metadata);
    for (const auto* spec : shards[s]) {
      writer.declare(spec->name, options.dtype, spec->shape);
      weight_map[spec->name] = name;
    }
    for (const auto* spec : shards[s]) write_tensor_data(writer, *spec, config, options.dtype, options.seed);
    writer.finish();
  }
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  write_file_atomically(dir / "model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig model_preset(std::string_view name) {
  std::string known;
  for (const auto& p : kPresets) {
    if (name == p.name) return p.make();
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  fail("unknown model preset '", name, "' (known: ", known, ")");
}

void write_random_model(const ModelConfig& input_config, const fs::path& out_arg, const RandomModelOptions& options) {
  const fs::path& out = out_arg;
  if (!is_floating(options.dtype) || options.dtype == DType::F64) fail("random models are written in f32, f16 or bf16");
  ModelConfig config = input_config;
  config.dtype = options.dtype;
  // Round-trip through JSON so that a config that would not load again is refused before anything is written.
  config = ModelConfig::from_json(config.to_json(), "generated config.json");
  PreprocessorConfig::from_json(options.preprocessor.to_json(), "generated preprocessor_config.json");

  if (config.quantization)
    fail("a quantised config (quantization_config) is not written with random weights: write the model unquantised, "
         "then run qvl quantize");
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    if (!fs::exists(options.tokenizer_dir / file)) fail((options.tokenizer_dir / file).string(), ": missing (tokenizer files are copied from here)");

  StagedFolder folder(out, options.overwrite);
  const fs::path& staging = folder.path();
  write_file_atomically(staging / "config.json", config.to_json().dump(2) + "\n");
  write_file_atomically(staging / "generation_config.json", GenerationConfig{}.to_json().dump(2) + "\n");
  write_file_atomically(staging / "preprocessor_config.json", options.preprocessor.to_json().dump(2) + "\n");
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    copy_file_atomically(options.tokenizer_dir / file, staging / file);
  write_checkpoint(config, staging, options);
  folder.publish();
}

}  // namespace qvl
