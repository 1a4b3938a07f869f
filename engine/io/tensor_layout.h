#pragma once
// The tensors a Qwen3-VL checkpoint holds for a given config: names exactly as Hugging Face writes them and
// PyTorch shapes ([out, in] for linear weights). Used by the folder check, the random-model writer and the
// parameter count, so the three can never disagree.
#include <optional>
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
  std::optional<DType> dtype{};  // required type (quantised values and scales); unset: f32, f16 or bf16
};

// The model's tensors as PyTorch has them (unquantised shapes).
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

// Where a quantisation applies: the format and group a tensor is quantised to, or nullopt where it keeps its type.
// Linear layers and the patch embedding (as [out, C·T·P·P]) take the matrices' format, the embedding table and an
// untied output head the embedding's; norms, biases and position embeddings are never quantised.
struct QuantisedAs {
  WeightFormat format;
  int64_t group;
};
std::optional<QuantisedAs> quantised_as(const TensorSpec& spec, const QuantizationConfig& q);
// The name of a quantised weight's scales: "x.weight" -> "x.weight_scale".
std::string scale_name(const std::string& weight_name);
// The tensors a folder of this config stores: quantised weights as values [out, row bytes] in the format's storage
// type, and their scales [out, groups] f16.
std::vector<TensorSpec> stored_tensors(const ModelConfig& config);

}  // namespace qvl
