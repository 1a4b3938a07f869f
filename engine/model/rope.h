#pragma once
// Rotary tables and multimodal position ids for Qwen3-VL (reference spec sections 4.3, 5.2, 5.3).
#include <array>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "io/model_config.h"

namespace qvl {

struct ImageGrid {
  int64_t t = 1, h = 0, w = 0;  // in patches (before the 2x2 merge)
  bool operator==(const ImageGrid&) const = default;
};
// The patches of all these images together (the vision tower's rows).
int64_t patch_count(const std::vector<ImageGrid>& grids);

// Positions on the (t, h, w) axes for every prompt token, as transformers' get_rope_index: text runs count up on
// all axes; the pads of an image get (cur, cur + row, cur + col) on its merged grid, and the text after it resumes
// at 1 + the largest position used. `delta` = (max position + 1) - length; decode step n uses n + delta.
struct PromptPositions {
  std::array<std::vector<int64_t>, 3> axes;
  int64_t delta = 0;
};
PromptPositions multimodal_positions(const std::vector<int32_t>& ids, const ModelConfig& config,
                                     const std::vector<ImageGrid>& grids);

// Text rotary tables [S, head_dim] (cos, sin) for positions on the three axes, interleaved mRoPE: frequency j
// follows axis h when j % 3 == 1 and j < 3·sections[1], w when j % 3 == 2 and j < 3·sections[2], else t.
std::pair<Tensor, Tensor> text_rope_tables(const TextConfig& config, const std::array<std::vector<int64_t>, 3>& positions,
                                           std::size_t begin, std::size_t count);

// The rotary tables of `count` decode tokens from position `first`: a generated token's position is its cache
// position + the prompt's delta (PromptPositions::delta), the same on all three axes.
std::pair<Tensor, Tensor> decode_rope_tables(const TextConfig& config, int64_t first, int64_t count);

// Vision rotary tables [N, head_dim] for all patches of all images in merge-window order: the first quarter of
// frequencies by patch row, the second by column, then repeated (rotate_half pairs d and d + head_dim/2).
std::pair<Tensor, Tensor> vision_rope_tables(const VisionConfig& config, const std::vector<ImageGrid>& grids);

// The learned position embedding (num_position_embeddings rows, a square grid), bilinearly interpolated to each
// image's grid in merge-window order: for each patch the four table rows around it and their weights (Backend::add_blended_rows
// adds them to the patch rows, on the device that holds the table).
RowBlend position_blend(const VisionConfig& config, const std::vector<ImageGrid>& grids);

}  // namespace qvl
