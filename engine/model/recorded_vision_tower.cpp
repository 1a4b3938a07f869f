#include "model/recorded_vision_tower.h"

#include <utility>

#include "core/cancel.h"

namespace qvl {

namespace {

// A copy on the backend of one of the recording's outputs.
Tensor copied(Backend& be, const Tensor& t) {
  Tensor out = be.alloc(t.shape());
  be.copy_rows(t, out, 0);
  return out;
}

}  // namespace

VisionOutput RecordedVisionTower::encode(Backend& be, const ModelConfig& config, const VisionWeights& weights,
                                         const Tensor& pixel_values, const std::vector<ImageGrid>& grids,
                                         const std::atomic<bool>* stop) {
  replayed_last_ = false;
  pending_.clear();  // a pass whose request failed before recording it leaves nothing for the next one
  if (recording_ && recording_->backend == &be && recording_->grids == grids && be.can_record()) {
    stop_if_requested(stop);
    VisionOutput out = replay(be, pixel_values);
    stop_if_requested(stop);
    replayed_last_ = true;
    return out;
  }
  pending_ = grids;
  return encode_images(be, config, weights, pixel_values, grids, stop);
}

bool RecordedVisionTower::record_pending(Backend& be, const ModelConfig& config, const VisionWeights& weights,
                                         uint64_t hold_limit) {
  const std::vector<ImageGrid> grids = std::exchange(pending_, {});
  if (recording_ && (held_bytes() > hold_limit || recording_->backend != &be)) recording_.reset();
  if (recording_ && recording_->grids == grids) return true;  // the pass went op by op while kernels were timed
  const int64_t patches = patch_count(grids);
  // A recording's bytes grow with its patches: one as large as a refused one would be refused too (and the held one
  // stays).
  if (grids.empty() || (refused_patches_ > 0 && patches >= refused_patches_) || hold_limit == 0 || !be.can_record())
    return false;
  recording_.reset();  // one recording at a time: its buffers go before the next one's are taken
  refused_patches_ = patches;  // until it is held: a recording that fails or exceeds the limit is not tried again
  auto recording = std::make_unique<Recording>();
  recording->backend = &be;
  recording->grids = grids;
  // The tables the tower uploads (position blend, rotary rows, segment bounds) follow from the grids alone: fixed.
  if (!be.begin_recording(RecordedUploads::Fixed)) return false;
  try {
    recording->pixels = be.alloc({patches, config.vision.patch_dim()});  // the recording's: counted in its bytes
    recording->output = encode_images(be, config, weights, recording->pixels, grids);
  } catch (...) {
    // Leave the backend able to run ops again; the first error is the one to report (a failure the capture saw,
    // such as the pool's, may leave ending it failing too).
    try {
      be.end_recording();
    } catch (const std::exception&) {
    }
    throw;
  }
  recording->work = be.end_recording();
  if (!recording->work || recording->work->bytes() > hold_limit) return false;
  recording_ = std::move(recording);
  refused_patches_ = 0;
  return true;
}

VisionOutput RecordedVisionTower::replay(Backend& be, const Tensor& pixel_values) const {
  be.copy_rows(pixel_values, recording_->pixels, 0);
  be.replay(*recording_->work);
  VisionOutput out{copied(be, recording_->output.embeddings), {}};
  for (const Tensor& d : recording_->output.deepstack) out.deepstack.push_back(copied(be, d));
  return out;
}

void RecordedVisionTower::forget() {
  recording_.reset();
  pending_.clear();
  refused_patches_ = 0;
}

uint64_t RecordedVisionTower::held_bytes() const { return recording_ ? recording_->work->bytes() : 0; }

}  // namespace qvl
