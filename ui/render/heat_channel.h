#pragma once
// The attention view's frames (AttentionFrame: one decode step's heat over the latest image's merged patches) from
// the engine's thread to a view (frame_channel.h says how they travel): copied by the backend into shared memory,
// or read back to the host.
#include <chrono>

#include "render/frame_channel.h"
#include "runtime/engine.h"

namespace qvl::render {

struct HeatFrameMeta {
  uint32_t grid_w = 0, grid_h = 0;
  int64_t layer = 0, head = -1, step = 0;
};

class HeatChannel : public FrameChannel<HeatFrameMeta> {
public:
  // The most merged patches one picture has (Qwen3-VL-2B's longest_edge of 16,777,216 pixels in 32 x 32 cells).
  static constexpr int64_t kMaxCells = 16384;
  HeatChannel(VulkanDevice& device, bool share_with_cuda) : FrameChannel(device, kMaxCells * sizeof(float), share_with_cuda) {}

  // At most one frame in 33 ms (30 a second, as the pool map): a step closer than this to the last frame published is
  // skipped before anything is copied (at 500 tokens/s, 15 steps in 16).
  static constexpr double kMinIntervalMs = 33.0;

  // The engine's thread: the step's heat (f32) into the next slot, copied on the GPU by `facet` when the channel is
  // shared, else read back through the frame's backend. False when skipped or dropped (also for a grid over
  // kMaxCells).
  bool publish(const AttentionFrame& frame, DeviceInterop* facet);
  uint64_t frames_skipped() const { return skipped_; }

private:
  std::chrono::steady_clock::time_point last_{};
  uint64_t skipped_ = 0;
};

}  // namespace qvl::render
