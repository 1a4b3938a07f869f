#pragma once
// The engine's side of an attention view (Engine::set_attention_view): where the latest image's tokens are in the
// prompt, the decoder's tap kept following the view (a heat tensor on the tapped layer's backend), and each decode
// step's heat handed to the sink (TokenSink::on_attention).
#include <optional>
#include <span>
#include <vector>

#include "model/rope.h"
#include "model/text_decoder.h"
#include "runtime/engine.h"

namespace qvl {

struct ImageTokens {
  int64_t first = 0, count = 0;   // prompt rows
  int64_t grid_h = 0, grid_w = 0;  // merged patches: grid_h * grid_w == count
  int64_t image = 0;               // which image of the prompt
};
// The last run of `image_token` in the prompt and its image's merged grid (grids in prompt order); nullopt without
// an image or when the run and the grid disagree.
std::optional<ImageTokens> latest_image_tokens(std::span<const int32_t> prompt_ids, int32_t image_token,
                                               const std::vector<ImageGrid>& grids, int64_t merge);

class AttentionTapper {
public:
  AttentionTapper(TextDecoder& decoder, std::optional<ImageTokens> image, int64_t layers, int64_t heads)
      : decoder_(decoder), image_(image), layers_(layers), heads_(heads) {}
  // Before a step: the tap the view asks for now (off without an image or for a layer out of range).
  void follow(AttentionView view);
  // After the step: its heat to the sink, when a tap ran.
  void deliver(TokenSink& sink, int64_t step) const;

private:
  Backend* backend_of(int64_t layer) const;

  TextDecoder& decoder_;
  std::optional<ImageTokens> image_;
  int64_t layers_, heads_;
  Backend* heat_backend_ = nullptr;  // where decoder_'s tap heat lives
};

}  // namespace qvl
