#pragma once
#include <functional>
// Qwen3-VL's weights, bound by name from a checkpoint and handed to a backend (upload). The structure mirrors the
// Hugging Face module tree; q/k/v of a vision block are row slices of the fused qkv weight.
#include <vector>

#include "backend/backend.h"
#include "io/model_folder.h"

namespace qvl {

struct LinearWeights {
  Tensor weight, bias;  // bias undefined (numel 0, no data) when the layer has none
  const Tensor* bias_or_null() const { return bias.raw() ? &bias : nullptr; }
};
struct NormWeights {
  Tensor weight, bias;  // bias only for LayerNorm
};

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
  Tensor lm_head;  // on the backend; the embedding itself when tied
};

struct ModelWeights {
  VisionWeights vision;
  TextWeights text;
};

// progress(fraction) is called as the weights reach the backend (by bytes of the checkpoint), ending at 1.
ModelWeights bind_weights(const ModelFolder& model, Backend& backend,
                          const std::function<void(double)>& progress = {});

}  // namespace qvl
