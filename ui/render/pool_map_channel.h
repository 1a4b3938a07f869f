#pragma once
// The pool map's frames (pool_picture.h's codes) from the engine's thread to a view (frame_channel.h says how they
// travel): drawn by the backend's kernel into shared memory, or on the host.
#include "render/frame_channel.h"

namespace qvl::render {

struct PoolFrameMeta {
  PoolMapGeometry geometry{0, 0, 0};
  int capacity_column = -1;
};

// Whether the pool changed since the last frame, from a report without the segment map (cheap): a decode step
// replayed from its recording allocates nothing, so during an answer the map stays as it was and needs no new frame
// (building one from the 2B model's segment map took 0.3-0.5 ms of the engine's thread).
class PoolChangeWatch {
public:
  bool changed(const MemoryReport& quick) {
    const Key key{quick.alloc_count, quick.free_count, quick.capacity, quick.reserved};
    if (key == last_) return false;
    last_ = key;
    return true;
  }

private:
  struct Key {
    int64_t allocs = -1, frees = -1, capacity = -1, reserved = -1;
    bool operator==(const Key&) const = default;
  };
  Key last_;
};

class PoolMapChannel : public FrameChannel<PoolFrameMeta> {
public:
  // The largest map a view asks for (the slots are sized for it once): 4096 x 1024 codes, 4 MiB a slot.
  static constexpr int kMaxWidth = 4096, kMaxHeight = 1024;
  PoolMapChannel(VulkanDevice& device, bool share_with_cuda)
      : FrameChannel(device, uint64_t(kMaxWidth) * kMaxHeight, share_with_cuda) {}

  // The engine's thread: `report` (with its segment map) into the next slot, by `facet`'s kernel when the channel is
  // shared, else on the host. False when the frame was dropped.
  bool publish(const MemoryReport& report, DeviceInterop* facet);
  // The view's thread: the size of the next frames (clamped to the slots).
  void set_geometry(const PoolMapGeometry& geometry);

private:
  std::mutex geometry_mutex_;
  PoolMapGeometry geometry_;
};

}  // namespace qvl::render
