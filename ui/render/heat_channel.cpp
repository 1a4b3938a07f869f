#include "render/heat_channel.h"

#include <cstring>

namespace qvl::render {

bool HeatChannel::publish(const AttentionFrame& frame, DeviceInterop* facet) {
  const int64_t cells = frame.grid_h * frame.grid_w;
  if (cells <= 0 || cells > kMaxCells || frame.heat->numel() != cells) return false;
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double, std::milli>(now - last_).count() < kMinIntervalMs) {
    ++skipped_;
    return false;
  }
  last_ = now;
  return FrameChannel::publish(facet, [&](const Target& target) {
    if (target.facet) {
      target.facet->copy_to(*frame.heat, target.memory, target.offset);
    } else {
      const Tensor host = frame.backend->to_host(*frame.heat);
      std::memcpy(target.host, host.data<float>(), std::size_t(cells) * sizeof(float));
    }
    return HeatFrameMeta{uint32_t(frame.grid_w), uint32_t(frame.grid_h), frame.layer, frame.head, frame.step};
  });
}

}  // namespace qvl::render
