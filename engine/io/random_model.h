#pragma once
// Random-weight Qwen3-VL checkpoints in the Hugging Face layout, for tests, benchmarks and the demo. Weights are
// deterministic for a seed (each tensor's stream is seeded from the seed and its name, so the values do not depend
// on file order or sharding) and scaled so activations stay well-conditioned: linear weights have variance
// 1/fan_in, norm weights are near 1, and the embedding makes logits of standard deviation about 3.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/model_config.h"

namespace qvl {

struct RandomModelOptions {
  DType dtype = DType::BF16;
  uint64_t seed = 0;
  uint64_t max_shard_bytes = 0;            // 0: one model.safetensors
  std::filesystem::path tokenizer_dir;     // tokenizer.json and tokenizer_config.json are copied from here
  bool overwrite = false;
  PreprocessorConfig preprocessor;         // written as preprocessor_config.json (pixel budgets for small tests)
};

std::vector<std::string> model_preset_names();
// Throws qvl::Error listing the known presets when `name` is not one of them.
ModelConfig model_preset(std::string_view name);

void write_random_model(const ModelConfig& config, const std::filesystem::path& out, const RandomModelOptions& options);

}  // namespace qvl
