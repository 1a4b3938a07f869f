#pragma once
// `qvl quantize`: a model folder whose weights are quantised once, read back without quantising again, and the
// floats a quantised model computes with, written as an ordinary f32 folder for transformers to run (the reference
// a quantised model is compared with). Both keep every other file of the folder (tokenizer, preprocessor and
// generation configs); config.json gains or loses its quantization_config. The folder appears only when complete
// (io/staged_folder.h). docs/quantization.md describes the stored tensors.
#include <filesystem>
#include <optional>

#include "io/model_folder.h"

namespace qvl {

// Throws qvl::Error for a folder that is already quantised (naming its format) and for weights that cannot be
// quantised (NaN, infinity, a scale past f16: named with the tensor).
void write_quantized_model(const ModelFolder& model, const QuantizationConfig& q, const std::filesystem::path& out,
                           bool overwrite);
// The weights the quantised model computes with, in f32 (d · q exactly; bf16 would round q8's largest values by up to
// a quarter of a step): a quantised folder's own, or an unquantised folder's
// quantised with `quantise` first (then required).
void write_dequantized_model(const ModelFolder& model, const std::optional<QuantizationConfig>& quantise,
                             const std::filesystem::path& out, bool overwrite);

}  // namespace qvl
