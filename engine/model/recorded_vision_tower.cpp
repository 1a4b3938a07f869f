#include "model/recorded_vision_tower.h"

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
                                         uint64_t hold_limit, const std::atomic<bool>* stop) {
  replayed_last_ = false;
  if (hold_limit == 0) recording_.reset();
  const bool recorded = recording_ && recording_->backend == &be && recording_->grids == grids;
  if (recorded && held_bytes() > hold_limit) recording_.reset();  // the limit shrank below what it holds
  else if (recorded && be.can_record()) {
    stop_if_requested(stop);
    VisionOutput out = replay(be, pixel_values);
    stop_if_requested(stop);
    replayed_last_ = true;
    return out;
  }
  if (hold_limit > 0 && grids == last_op_by_op_ && grids != too_large_ && be.can_record()) {
    stop_if_requested(stop);
    recording_.reset();  // one recording at a time: its buffers go before the next one's are taken
    recording_ = record(be, config, weights, pixel_values, grids, hold_limit);
    if (recording_) {
      VisionOutput out = replay(be, pixel_values);
      stop_if_requested(stop);
      replayed_last_ = true;
      return out;
    }
    too_large_ = grids;
  }
  last_op_by_op_ = grids;
  return encode_images(be, config, weights, pixel_values, grids, stop);
}

std::unique_ptr<RecordedVisionTower::Recording> RecordedVisionTower::record(Backend& be, const ModelConfig& config,
                                                                          const VisionWeights& weights,
                                                                          const Tensor& pixel_values,
                                                                          const std::vector<ImageGrid>& grids,
                                                                          uint64_t hold_limit) {
  auto recording = std::make_unique<Recording>();
  recording->backend = &be;
  recording->grids = grids;
  recording->pixels = be.alloc(pixel_values.shape());
  // The tables the tower uploads (position blend, rotary rows, segment bounds) follow from the grids alone: fixed.
  if (!be.begin_recording(RecordedUploads::Fixed)) return nullptr;
  try {
    // No stop inside: a recording left half-made would have to be ended anyway (checked around the replay).
    recording->output = encode_images(be, config, weights, recording->pixels, grids, nullptr);
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
  if (!recording->work || held_bytes_of(*recording) > hold_limit) return nullptr;
  return recording;
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
  last_op_by_op_.clear();
  too_large_.clear();
}

uint64_t RecordedVisionTower::held_bytes() const { return recording_ ? held_bytes_of(*recording_) : 0; }

}  // namespace qvl
