#pragma once
// The Qwen3-VL vision tower (reference spec section 4): patch embedding, interpolated position embedding, 2D RoPE,
// pre-LN blocks with block-diagonal attention (one block per image), the 2x2 merger and the DeepStack mergers.
#include <atomic>
#include <vector>

#include "model/rope.h"
#include "model/weights.h"

namespace qvl {

struct VisionOutput {
  Tensor embeddings;              // [Σ t·h·w / merge², text hidden]
  std::vector<Tensor> deepstack;  // one per deepstack block, in block order; same shape
};

// pixel_values: [Σ t·h·w, C·T·P·P] f32 on the backend, in merge-window row order (vision/preprocess.h). `stop` is
// checked before every block and at the end (core/cancel.h: a set flag throws Cancelled).
VisionOutput encode_images(Backend& backend, const ModelConfig& config, const VisionWeights& weights,
                           const Tensor& pixel_values, const std::vector<ImageGrid>& grids,
                           const std::atomic<bool>* stop = nullptr);

}  // namespace qvl
