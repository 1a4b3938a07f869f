#include "model/quantized_folder.h"

#include "core/limits.h"
#include "backend/quantize.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "io/staged_folder.h"
#include "io/tensor_layout.h"

namespace qvl {
namespace fs = std::filesystem;

namespace {

// The folder's other model files (the configs but config.json, the tokenizer's files, chat templates:
// is_model_file_name, so that StagedFolder replaces the result again), into `to`. The weights are written anew.
void copy_other_files(const fs::path& from, const fs::path& to) {
  for (const auto& entry : fs::directory_iterator(from)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || name == "model.safetensors.index.json" ||
        !is_model_file_name(name) || name.ends_with(".safetensors"))
      continue;
    copy_file_atomically(entry.path(), to / name);
  }
}

void refuse_own_folder(const ModelFolder& model, const fs::path& out) {
  if (fs::weakly_canonical(fs::absolute(out)) == fs::weakly_canonical(fs::absolute(model.dir)))
    fail(out.string(), ": is the folder being read; write the result to another folder");
}

void write_config(const ModelFolder& model, const fs::path& to, const std::optional<QuantizationConfig>& q) {
  nlohmann::json config = read_json_file(model.dir / "config.json", limits::kConfigFileBytes);
  if (q) {
    config["quantization_config"] = q->to_json();
  } else {
    config.erase("quantization_config");
    config["dtype"] = "float32";  // the dequantised matrices, exact; the other tensors keep their types
    if (config.contains("torch_dtype")) config["torch_dtype"] = "float32";
  }
  write_file_atomically(to / "config.json", config.dump(2) + "\n");
}

// A quantised matrix of the folder as a unit: its stored values and scales (the folder is quantised), or `spec`'s
// tensor quantised with `q`.
LinearWeights quantised_unit(const ModelFolder& model, const TensorSpec& spec, const QuantisedAs& as, bool stored) {
  const Tensor t = model.checkpoint.tensor(spec.name);
  const int64_t rows = spec.shape[0], in = shape_numel(spec.shape) / rows;
  if (stored)
    return LinearWeights::quantised_of(as.format, as.group, in, t, model.checkpoint.tensor(scale_name(spec.name)));
  return quantize_matrix(t.reshaped({rows, in}), as.format, as.group, spec.name);
}

}  // namespace

void write_quantized_model(const ModelFolder& model, const QuantizationConfig& q, const fs::path& out, bool overwrite) {
  if (model.config.quantization)
    fail(model.dir.string(), ": already quantised (", model.config.quantization->name(),
         "); quantise the unquantised folder, or --dequantize-to to get its floats back");
  ModelConfig stored = model.config;
  stored.quantization = q;
  refuse_own_folder(model, out);
  StagedFolder folder(out, overwrite);
  copy_other_files(model.dir, folder.path());
  write_config(model, folder.path(), q);
  SafetensorsWriter writer(folder.path() / "model.safetensors", {{"format", "pt"}, {"quantized_by", "qvl"}});
  for (const TensorSpec& spec : stored_tensors(stored))
    writer.declare(spec.name, spec.dtype ? *spec.dtype : model.checkpoint.find(spec.name)->info->dtype, spec.shape);
  for (const TensorSpec& spec : expected_tensors(model.config)) {
    const auto as = quantised_as(spec, q);
    if (!as) {
      const Tensor t = model.checkpoint.tensor(spec.name);
      writer.append(t.raw(), t.nbytes());
      continue;
    }
    const LinearWeights w = quantised_unit(model, spec, *as, false);
    writer.append(w.scales.raw(), w.scales.nbytes());  // stored_tensors lists the scales before the values
    writer.append(w.weight.raw(), w.weight.nbytes());
  }
  writer.finish();
  folder.publish();
}

void write_dequantized_model(const ModelFolder& model, const std::optional<QuantizationConfig>& quantise,
                             const fs::path& out, bool overwrite) {
  const std::optional<QuantizationConfig>& q = model.config.quantization ? model.config.quantization : quantise;
  if (!q) fail(model.dir.string(), ": not quantised; name the quantisation to apply first (--weights q8 or q4)");
  if (model.config.quantization && quantise && *quantise != *model.config.quantization)
    fail(model.dir.string(), ": holds ", model.config.quantization->name(), " weights, not ", quantise->name());
  refuse_own_folder(model, out);
  StagedFolder folder(out, overwrite);
  copy_other_files(model.dir, folder.path());
  write_config(model, folder.path(), std::nullopt);
  SafetensorsWriter writer(folder.path() / "model.safetensors", {{"format", "pt"}, {"dequantized_by", "qvl"}});
  const std::vector<TensorSpec> specs = expected_tensors(model.config);
  for (const TensorSpec& spec : specs) {
    const bool quantised = quantised_as(spec, *q).has_value();
    writer.declare(spec.name, quantised ? DType::F32 : model.checkpoint.find(spec.name)->info->dtype, spec.shape);
  }
  for (const TensorSpec& spec : specs) {
    if (const auto as = quantised_as(spec, *q)) {
      const Tensor floats = dequantize_matrix(quantised_unit(model, spec, *as, model.config.quantization.has_value()));
      writer.append(floats.raw(), floats.nbytes());
    } else {
      const Tensor t = model.checkpoint.tensor(spec.name);
      writer.append(t.raw(), t.nbytes());
    }
  }
  writer.finish();
  folder.publish();
}

}  // namespace qvl
