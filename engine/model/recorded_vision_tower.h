#pragma once
// The vision tower's work recorded once for a set of image grids and replayed for the next pictures of those sizes.
// On a GPU the host takes about as long to queue a 448² picture's ~240 kernels as the GPU takes to run them (the
// products' host side above all: docs/performance.md, "The vision tower replayed"), so the GPU waited on the host;
// replayed, the tower is one launch and the host queues the prefill while the GPU runs it.
//
// A recording holds the tower's buffers (every tensor it allocated) until it is forgotten: one recording at a time,
// made for grids seen in the request before (a picture size met once is not worth the recording's cost), and kept
// only within the caller's byte limit. The features a replay gives are copies: the next replay writes its buffers.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/vision_encoder.h"

namespace qvl {

class RecordedVisionTower {
public:
  // encode_images' result for these patches: replayed where these grids are recorded on this backend, recorded where
  // the last pass op by op had them (and the recording's bytes stay within hold_limit: else dropped, not tried for
  // them again), else op by op. 0 as the limit: nothing is recorded (the one held is forgotten). `stop` is checked
  // before and after a replay.
  VisionOutput encode(Backend& be, const ModelConfig& config, const VisionWeights& weights, const Tensor& pixel_values,
                      const std::vector<ImageGrid>& grids, uint64_t hold_limit, const std::atomic<bool>* stop);
  // The recording goes, and what was seen before (the weights, the fusions or the backend changed).
  void forget();
  uint64_t held_bytes() const;  // device memory the recording holds
  bool replayed_last() const { return replayed_last_; }  // the last encode replayed a recording

private:
  struct Recording {
    const Backend* backend = nullptr;
    std::vector<ImageGrid> grids;
    Tensor pixels;        // the input every replay reads: the patches are copied in first
    VisionOutput output;  // what every replay writes
    std::shared_ptr<RecordedWork> work;
  };
  // The recording for these grids, or none (it exceeded hold_limit, or the backend records nothing now).
  std::unique_ptr<Recording> record(Backend& be, const ModelConfig& config, const VisionWeights& weights,
                                    const Tensor& pixel_values, const std::vector<ImageGrid>& grids, uint64_t hold_limit);
  VisionOutput replay(Backend& be, const Tensor& pixel_values) const;
  static uint64_t held_bytes_of(const Recording& r) { return r.work->bytes() + r.pixels.nbytes(); }

  std::unique_ptr<Recording> recording_;
  std::vector<ImageGrid> last_op_by_op_;  // the grids the last pass op by op had: the next pass with them records
  std::vector<ImageGrid> too_large_;      // the last grids whose recording exceeded the limit
  bool replayed_last_ = false;
};

}  // namespace qvl
