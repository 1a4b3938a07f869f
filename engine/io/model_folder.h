#pragma once
// A Hugging Face Qwen3-VL model folder, opened and checked: configs parsed, every expected tensor present with the
// right shape and a floating dtype, nothing unexpected. All problems are reported together in one error, so a user
// fixing a broken download sees the whole list at once.
#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/model_config.h"

namespace qvl {

struct ModelFolder {
  std::filesystem::path dir;
  ModelConfig config;
  GenerationConfig generation;
  PreprocessorConfig preprocessor;
  Checkpoint checkpoint;
  std::filesystem::path tokenizer_json;
  std::vector<std::string> notes;  // harmless oddities (e.g. an lm_head.weight in a tied checkpoint, ignored)

  static ModelFolder open(const std::filesystem::path& dir);
};

// Compares a checkpoint with the tensors the config implies; returns one line per problem (empty when all is well).
std::vector<std::string> check_tensors(const ModelConfig& config, const Checkpoint& checkpoint,
                                       std::vector<std::string>* notes = nullptr);

}  // namespace qvl
