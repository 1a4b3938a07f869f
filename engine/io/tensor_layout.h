#pragma once
// The tensors a Qwen3-VL checkpoint holds for a given config: names exactly as Hugging Face writes them and
// PyTorch shapes ([out, in] for linear weights). Used by the folder check, the random-model writer and the
// parameter count, so the three can never disagree.
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"

namespace qvl {

enum class TensorRole { Embedding, Linear, Bias, NormWeight, NormBias, PositionEmbedding, PatchEmbed };

struct TensorSpec {
  std::string name;
  Shape shape;
  TensorRole role;
};

std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

}  // namespace qvl
