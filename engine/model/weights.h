#pragma once
// Qwen3-VL's weights, bound by name from a checkpoint and handed to a backend (upload, told each weight's role).
// The structure mirrors the Hugging Face module tree; q/k/v of a vision block are row slices of the fused qkv weight.
// Linear layers are units (LinearWeights: matrix, bias, format; backend/weight_format.h).
#include <functional>
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
  Tensor position_table;       // host f32 copy: interpolated on the host each image
  std::vector<VisionBlockWeights> blocks;
  MergerWeights merger;
  std::vector<MergerWeights> deepstack;
};
struct DecoderLayerWeights {
  NormWeights input_norm, post_attention_norm, q_norm, k_norm;
  LinearWeights q, k, v, o, gate, up, down;
};
struct TextWeights {
  Tensor embed_tokens;
  std::vector<DecoderLayerWeights> layers;
  NormWeights final_norm;
  LinearWeights lm_head;  // the embedding table itself when tied
};

struct ModelWeights {
  VisionWeights vision;
  TextWeights text;
};

// progress(fraction) is called as the weights reach the backend (by bytes of the checkpoint), ending at 1.
ModelWeights bind_weights(const ModelFolder& model, Backend& backend,
                          const std::function<void(double)>& progress = {});

}  // namespace qvl
