#include "io/model_folder.h"

#include <map>

#include "core/error.h"
#include "io/tensor_layout.h"

namespace qvl {
namespace fs = std::filesystem;

std::vector<std::string> check_tensors(const ModelConfig& config, const Checkpoint& checkpoint,
                                       std::vector<std::string>* notes) {
  std::vector<std::string> missing, wrong, unexpected;
  std::map<std::string, bool> expected_names;
  for (const auto& spec : stored_tensors(config)) {
    expected_names[spec.name] = true;
    const auto* entry = checkpoint.find(spec.name);
    if (!entry) {
      missing.push_back(spec.name);
      continue;
    }
    if (entry->info->shape != spec.shape)
      wrong.push_back(spec.name + ": shape " + shape_to_string(entry->info->shape) + ", expected " + shape_to_string(spec.shape));
    else if (spec.dtype && entry->info->dtype != *spec.dtype)
      wrong.push_back(spec.name + ": dtype " + std::string(dtype_safetensors_name(entry->info->dtype)) + ", expected " +
                      std::string(dtype_safetensors_name(*spec.dtype)) + " (quantization_config)");
    else if (!spec.dtype && (!is_floating(entry->info->dtype) || entry->info->dtype == DType::F64))
      wrong.push_back(spec.name + ": dtype " + std::string(dtype_safetensors_name(entry->info->dtype)) +
                      ", expected F32, F16 or BF16");
  }
  for (const auto& [name, entry] : checkpoint.entries()) {
    if (expected_names.contains(name)) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) {
      // transformers ties the head to the embedding regardless, so this tensor is never used.
      if (notes) notes->push_back("lm_head.weight is present but tie_word_embeddings is true: it is ignored");
      continue;
    }
    unexpected.push_back(name);
  }

  std::vector<std::string> problems;
  auto report = [&](const char* what, const std::vector<std::string>& names) {
    constexpr std::size_t kShown = 12;  // a wrong config can make hundreds; the first few and a count suffice
    for (std::size_t i = 0; i < names.size() && i < kShown; ++i) problems.push_back(std::string(what) + names[i]);
    if (names.size() > kShown) problems.push_back(cat("... and ", names.size() - kShown, " more ", what));
  };
  report("missing tensor: ", missing);
  report("wrong tensor: ", wrong);
  report("unexpected tensor: ", unexpected);
  return problems;
}

ModelFolder ModelFolder::open(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail(dir.string(), ": not a folder (a model folder holds config.json and *.safetensors)");
  ModelFolder m;
  m.dir = dir;
  m.config = ModelConfig::load(dir / "config.json");
  // Without these files transformers falls back to defaults; so do we.
  m.generation = GenerationConfig::load_or_default(dir / "generation_config.json");
  if (fs::exists(dir / "preprocessor_config.json"))
    m.preprocessor = PreprocessorConfig::load(dir / "preprocessor_config.json");
  if (m.preprocessor.patch_size != m.config.vision.patch_size || m.preprocessor.merge_size != m.config.vision.spatial_merge_size ||
      m.preprocessor.temporal_patch_size != m.config.vision.temporal_patch_size)
    fail((dir / "preprocessor_config.json").string(), ": patch_size/merge_size/temporal_patch_size disagree with config.json");

  m.checkpoint = Checkpoint::open(dir);
  const auto problems = check_tensors(m.config, m.checkpoint, &m.notes);
  if (!problems.empty()) {
    std::string text = dir.string() + ": the checkpoint does not match config.json:";
    for (const auto& p : problems) text += "\n  " + p;
    throw Error(text);
  }
  m.tokenizer_json = dir / "tokenizer.json";
  if (!fs::exists(m.tokenizer_json)) fail(m.tokenizer_json.string(), ": missing (the tokenizer is part of a model folder)");
  return m;
}

}  // namespace qvl
