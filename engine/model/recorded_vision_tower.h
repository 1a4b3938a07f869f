#pragma once
// The vision tower's work recorded once for a set of image grids and replayed for the next pictures of those sizes.
// On a GPU the host takes about as long to queue a 448² picture's ~240 kernels as the GPU takes to run them (the
// products' host side above all: docs/performance.md, "The vision tower replayed"), so the GPU waited on the host;
// replayed, the tower is one launch and the host queues the prefill while the GPU runs it.
//
// A pass op by op leaves its grids to record; the caller records them when nothing waits (after the answer), since a
// recording takes the host about as long as queueing the tower and the GPU waits meanwhile. A recording holds the
// tower's buffers (every tensor it allocated) until it is forgotten: one at a time, and only within the caller's
// byte limit. The features a replay gives are copies: the next replay writes its buffers.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/vision_encoder.h"

namespace qvl {

class RecordedVisionTower {
public:
  // encode_images' result for these patches: replayed where these grids are recorded on this backend and it records
  // now (per-kernel timing is off), else op by op, which leaves the grids to record (record_pending). `stop` is
  // checked before and after a replay.
  VisionOutput encode(Backend& be, const ModelConfig& config, const VisionWeights& weights, const Tensor& pixel_values,
                      const std::vector<ImageGrid>& grids, const std::atomic<bool>* stop);
  // Records the grids the last encode left (it went op by op), on the backend it ran on (the held recording goes
  // first), where that backend records now and hold_limit > 0. A recording over hold_limit, or one that throws, is not
  // held, and none of as many patches or more is tried again until one is held or all is forgotten. Throws what
  // recording throws (nothing is held then). Returns whether one is held for them now.
  bool record_pending(Backend& be, const ModelConfig& config, const VisionWeights& weights, uint64_t hold_limit);
  // The recording goes (the weights, the fusions or the backend changed; the memory is needed), and what was left
  // to record.
  void forget();
  uint64_t held_bytes() const;  // device memory the recording holds
  bool replayed_last() const { return replayed_last_; }  // the last encode replayed the recording

private:
  struct Recording {
    const Backend* backend = nullptr;
    std::vector<ImageGrid> grids;
    Tensor pixels;        // the input every replay reads: the patches are copied in first (the recording's tensor)
    VisionOutput output;  // what every replay writes
    std::shared_ptr<RecordedWork> work;
  };
  VisionOutput replay(Backend& be, const Tensor& pixel_values) const;

  std::unique_ptr<Recording> recording_;
  std::vector<ImageGrid> pending_;  // the grids the last encode had, when it went op by op (empty: none to record)
  int64_t refused_patches_ = 0;     // the patches of the smallest recording that failed or exceeded the limit
  bool replayed_last_ = false;
};

}  // namespace qvl
