#pragma once
// Qwen3-VL's weights, bound by name from a checkpoint and handed to a backend (upload, told each weight's role).
// The structure mirrors the Hugging Face module tree; q/k/v of a vision block are row slices of the fused qkv weight.
// Linear layers are units (LinearWeights: matrix, bias, format; backend/weight_format.h).
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "io/model_folder.h"

namespace qvl {

struct VisionBlockWeights {
  NormWeights norm1, norm2;
  LinearWeights q, k, v, proj, fc1, fc2;
};
struct MergerWeights {
  NormWeights norm;
  LinearWeights fc1, fc2;
};
struct VisionWeights {
  LinearWeights patch_embed;   // Conv3d viewed as [hidden, C·T·P·P]
  Tensor position_table;       // [side², hidden] on the vision backend, blended per patch (rope.h: position_blend)
  std::vector<VisionBlockWeights> blocks;
  MergerWeights merger;
  std::vector<MergerWeights> deepstack;
};
struct DecoderLayerWeights {
  NormWeights input_norm, post_attention_norm, q_norm, k_norm;
  LinearWeights q, k, v, o, gate, up, down;
};
struct TextWeights {
  LinearWeights embed_tokens;  // [vocab, hidden]: a table, and the output head when tied
  std::vector<DecoderLayerWeights> layers;
  NormWeights final_norm;
  LinearWeights lm_head;  // the embedding table itself when tied
};

struct ModelWeights {
  VisionWeights vision;
  TextWeights text;
};

// The formats the weights are held in (--weights). "bf16": as the folder stores them (a folder written by qvl
// quantize stays quantised); "q8": every linear layer of the decoder and the vision tower (in groups of 128) and
// the embedding table (with the tied output head; groups of 32) quantised to q8 at load; "q4": the linear layers q4
// in groups of 32, the embedding table q8 (the output head decides every token; 4 bits there would save 155 MB of
// the 2B's 1.12 GB, at an accuracy cost not measured yet). "q8-g32", "q4-g64" and "q4-g128" choose other groups for
// the linear layers (the embedding table keeps groups of 32). Norms, biases and position embeddings keep their types
// (io/tensor_layout.h: quantised_as).
struct WeightPolicy {
  std::string name = "bf16";
  std::optional<QuantizationConfig> quantise;  // nullopt: as stored
  // Throws qvl::Error naming the choices for an unknown name.
  static WeightPolicy from_name(std::string_view name);
  // The quantised choices from_name takes, for help texts: "q8, q8-g32, q4, q4-g64, q4-g128".
  static std::string quantised_names();
};

// Which backend each part's weights go to (a memory plan's placement): the vision tower; each decoder layer; the
// embedding table, final norm and output head (together, on the last decoder part's backend).
struct WeightPlacement {
  Backend* vision = nullptr;
  Backend* head = nullptr;
  std::vector<Backend*> layers;  // one per decoder layer
  static WeightPlacement all_on(Backend& backend, const ModelConfig& config);
};

// progress(fraction) is called as the weights reach the backend (by bytes of the checkpoint), ending at 1.
// Quantising is deterministic: the same checkpoint and policy give the same bits on every backend. A quantised folder
// takes "bf16" (as stored) or its own policy; another is refused (it would quantise twice).
ModelWeights bind_weights(const ModelFolder& model, const WeightPlacement& placement, const WeightPolicy& policy = {},
                          const std::function<void(double)>& progress = {});
ModelWeights bind_weights(const ModelFolder& model, Backend& backend, const WeightPolicy& policy = {},
                          const std::function<void(double)>& progress = {});

}  // namespace qvl
