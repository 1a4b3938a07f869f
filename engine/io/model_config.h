#pragma once
// The three configs of a Hugging Face Qwen3-VL folder: config.json (both the 4.57 spelling with rope_theta +
// rope_scaling and the 5.x spelling with rope_parameters), generation_config.json and preprocessor_config.json.
// Defaults are transformers' own for optional fields; sizes that define the network are required.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/weight_format.h"
#include "core/dtype.h"

namespace qvl {

struct TextConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 128;
  int64_t max_position_embeddings = 128000;
  double rms_norm_eps = 1e-6;
  double rope_theta = 5'000'000.0;
  std::vector<int64_t> mrope_section{24, 20, 20};  // frequencies on the t, h, w axes; sums to head_dim / 2
  bool mrope_interleaved = true;
  std::string hidden_act = "silu";
  bool attention_bias = false;
};

struct VisionConfig {
  int64_t depth = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_heads = 0;
  int64_t in_channels = 3;
  int64_t patch_size = 16;
  int64_t temporal_patch_size = 2;
  int64_t spatial_merge_size = 2;
  int64_t out_hidden_size = 0;
  int64_t num_position_embeddings = 2304;
  std::vector<int64_t> deepstack_visual_indexes{8, 16, 24};
  std::string hidden_act = "gelu_pytorch_tanh";
  double rope_theta = 10000.0;  // fixed in 4.57 code; 5.x saves it as rope_parameters.rope_theta
  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int64_t merged_dim() const { return hidden_size * spatial_merge_size * spatial_merge_size; }
};

// Weights stored quantised (config.json's quantization_config, written by `qvl quantize`; docs/quantization.md):
// every linear layer of the decoder and the vision tower in `matrices` with groups of `group` values, the embedding
// table (and an untied output head) in `embedding` with groups of 32. The same description chooses what is quantised
// at load (--weights).
struct QuantizationConfig {
  // The group a format's plain name ("q8", "q4") means: q8 in groups of 128 (as close to transformers as 32 on the
  // goldens and the demo model, GPU decode 4.5-8% faster: docs/quantization.md), q4 in groups of 32 (its rounding
  // is ~16x q8's).
  static constexpr int64_t default_group(WeightFormat matrices) {
    return matrices == WeightFormat::Q8 ? 128 : kQuantBlock;
  }
  WeightFormat matrices = WeightFormat::Q8;
  int64_t group = default_group(WeightFormat::Q8);
  WeightFormat embedding = WeightFormat::Q8;
  bool operator==(const QuantizationConfig&) const = default;
  std::string name() const;  // "q8" (groups of 128), "q8-g32", "q4" (groups of 32), "q4-g128"
  nlohmann::json to_json() const;
  // Throws qvl::Error naming `source` and the field for anything else than qvl's own q8/q4 description.
  static QuantizationConfig from_json(const nlohmann::json& j, const std::string& source);
};

struct ModelConfig {
  TextConfig text;
  VisionConfig vision;
  int64_t image_token_id = 151655;
  int64_t video_token_id = 151656;
  int64_t vision_start_token_id = 151652;
  int64_t vision_end_token_id = 151653;
  bool tie_word_embeddings = false;
  DType dtype = DType::BF16;  // the checkpoint's declared dtype ("dtype" or "torch_dtype")
  std::optional<QuantizationConfig> quantization;  // a folder written by qvl quantize

  // Throws qvl::Error naming `source` and the field for missing, wrongly typed or inconsistent fields.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source = "config.json");
  static ModelConfig load(const std::filesystem::path& path);
  // Writes the 4.57 spelling (rope_theta + rope_scaling), which both transformers generations read.
  nlohmann::json to_json() const;

  int64_t parameter_count() const;  // from the shapes, embedding counted once when tied
};

struct GenerationConfig {
  std::vector<int64_t> eos_token_ids{151645, 151643};
  int64_t pad_token_id = 151643;
  int64_t bos_token_id = 151643;
  bool do_sample = true;
  double temperature = 0.7;
  int64_t top_k = 20;
  double top_p = 0.8;
  double repetition_penalty = 1.0;
  int64_t max_new_tokens = 0;  // 0: not set in the file

  static GenerationConfig from_json(const nlohmann::json& j, const std::string& source = "generation_config.json");
  static GenerationConfig load(const std::filesystem::path& path);
  // transformers' defaults when the file does not exist.
  static GenerationConfig load_or_default(const std::filesystem::path& path);
  nlohmann::json to_json() const;
};

struct PreprocessorConfig {
  int64_t min_pixels = 65536;     // "size.shortest_edge": a pixel budget, not an edge length
  int64_t max_pixels = 16777216;  // "size.longest_edge"
  int64_t patch_size = 16;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  std::vector<double> image_mean{0.5, 0.5, 0.5};
  std::vector<double> image_std{0.5, 0.5, 0.5};
  double rescale_factor = 1.0 / 255.0;
  int64_t resample = 3;  // PIL BICUBIC
  bool do_resize = true, do_rescale = true, do_normalize = true, do_convert_rgb = true;

  static PreprocessorConfig from_json(const nlohmann::json& j, const std::string& source = "preprocessor_config.json");
  static PreprocessorConfig load(const std::filesystem::path& path);
  nlohmann::json to_json() const;
};

}  // namespace qvl
