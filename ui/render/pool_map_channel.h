#pragma once
// The pool map's way from the engine to a view, without ever making the engine wait: two slots of codes
// (pool_picture.h) that the view colours. The engine's thread fills the next slot after a step, either with a CUDA
// kernel straight into Vulkan memory (interop: the view's queue waits for the `written` timeline semaphore on the
// GPU) or, where memory cannot be shared, on the host into a mapped staging buffer. A slot the view is still
// reading is never written: that frame is dropped instead (counted), so a slow or hidden view costs the engine
// nothing but the drawing itself.
#include <atomic>
#include <mutex>
#include <optional>

#include "backend/interop.h"
#include "render/picture_renderer.h"

namespace qvl::render {

class PoolMapChannel {
public:
  // The largest map a view asks for (the slots are sized for it once): 4096 x 1024 codes, 4 MiB a slot.
  static constexpr int kMaxWidth = 4096, kMaxHeight = 1024;

  // share_with_cuda: slots in exportable memory the CUDA backend imports (the device must allow it).
  PoolMapChannel(VulkanDevice& device, bool share_with_cuda);
  ~PoolMapChannel();
  bool shared_with_cuda() const { return shared_; }

  // ---- The engine's thread ----
  // Puts `report` (with its segment map) in the next slot: drawn by `facet`'s kernel when the channel is shared and
  // a facet is given, else on the host. False when the frame was dropped (the view is reading that slot).
  bool publish(const MemoryReport& report, DeviceInterop* facet);
  // The backend the imports were made into is going away (the model moves): import again on the next publish.
  void forget_imports();

  // ---- The view's thread ----
  void set_geometry(const PoolMapGeometry& geometry);  // clamped to the slots; takes effect from the next frame
  struct Frame {
    uint64_t number = 0;
    BufferRange codes;
    PoolMapGeometry geometry;
    int capacity_column = -1;
    bool wait_for_cuda = false;  // drawn by CUDA (written() has reached number: the submission may still name it)
  };
  // The newest frame not shown yet, now marked as being read (nullopt: none, the last one is still being read, or
  // CUDA has not finished drawing the newest yet).
  std::optional<Frame> take_newest();
  // The view's submission that reads `frame` signals read() = frame.number; call this once it has (or after
  // checking read().value()): the slot may be written again.
  void release(uint64_t number);
  // Polls read(): releases the frame being read once the GPU is done with it.
  void release_finished();
  const TimelineSemaphore& written() const { return *written_; }
  const TimelineSemaphore& read() const { return *read_; }

  uint64_t frames_published() const { return published_count_; }
  uint64_t frames_dropped() const { return dropped_count_; }

private:
  struct Slot {
    PoolMapGeometry geometry;
    int capacity_column = -1;
    bool by_cuda = false;
  };
  VulkanDevice& device_;
  bool shared_ = false;
  uint64_t slot_bytes_ = 0;
  std::unique_ptr<VulkanBuffer> buffer_;
  std::unique_ptr<TimelineSemaphore> written_, read_;

  std::mutex mutex_;  // guards what both threads touch below
  PoolMapGeometry geometry_;
  uint64_t published_ = 0, shown_ = 0, reading_ = 0;  // frame numbers (0: none)
  Slot slots_[2];
  std::atomic<uint64_t> published_count_{0}, dropped_count_{0};

  // The engine thread's imports (only it touches these).
  DeviceInterop* facet_ = nullptr;
  InteropHandle memory_ = 0, written_by_cuda_ = 0;
};

}  // namespace qvl::render
