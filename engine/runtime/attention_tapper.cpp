#include "runtime/attention_tapper.h"

#include <algorithm>

namespace qvl {

std::optional<ImageTokens> latest_image_tokens(std::span<const int32_t> ids, int32_t image_token,
                                               const std::vector<ImageGrid>& grids, int64_t merge) {
  const auto last = std::find(ids.rbegin(), ids.rend(), image_token);
  if (last == ids.rend() || grids.empty() || merge <= 0) return std::nullopt;
  const int64_t end = int64_t(ids.rend() - last);
  int64_t first = end - 1;
  while (first > 0 && ids[std::size_t(first - 1)] == image_token) --first;
  int64_t runs = 0;  // image runs in the prompt: the last one is grids[runs - 1]
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == image_token && (i == 0 || ids[i - 1] != image_token)) ++runs;
  const ImageGrid& g = grids[std::size_t(std::min<int64_t>(runs, int64_t(grids.size())) - 1)];
  const ImageTokens t{first, end - first, g.h / merge, g.w / merge, runs - 1};
  if (g.t != 1 || t.grid_h * t.grid_w != t.count || runs != int64_t(grids.size())) return std::nullopt;
  return t;
}

Backend* AttentionTapper::backend_of(int64_t layer) const {
  for (const DecoderPart& p : decoder_.parts())
    if (layer >= p.first_layer && layer < p.end_layer) return p.backend;
  return nullptr;
}

void AttentionTapper::follow(AttentionView view) {
  if (!image_ || view.layer < 0 || view.layer >= layers_) {
    if (decoder_.attention_tap().layer >= 0) decoder_.set_attention_tap({});
    return;
  }
  const int64_t head = view.head < 0 || view.head >= heads_ ? -1 : view.head;
  const AttentionTapSpec& now = decoder_.attention_tap();
  if (now.layer == view.layer && now.head == head) return;
  Backend* be = backend_of(view.layer);
  AttentionTapSpec tap{view.layer, head, image_->first, image_->count, {}};
  // The heat stays where it is while the layer's backend does (a recorded step keeps writing to the same tensor).
  tap.heat = be == heat_backend_ && now.count == image_->count ? now.heat : be->alloc({image_->count});
  heat_backend_ = be;
  decoder_.set_attention_tap(std::move(tap));
}

void AttentionTapper::deliver(TokenSink& sink, int64_t step) const {
  const AttentionTapSpec& tap = decoder_.attention_tap();
  if (tap.layer < 0 || !image_) return;
  sink.on_attention({&tap.heat, heat_backend_, image_->grid_h, image_->grid_w, image_->image, tap.layer, tap.head, step});
}

}  // namespace qvl
