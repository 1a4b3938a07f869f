#pragma once
// Frames from the engine's thread to a view, without ever making the engine wait: two slots the view reads. The
// engine's thread fills the next slot after a step, either on the GPU straight into Vulkan memory (interop: CUDA
// signals the `written` timeline semaphore, and the view takes a frame only once it has been reached) or, where
// memory cannot be shared, on the host into mapped memory. A slot the view is still reading is never written: that
// frame is dropped instead (counted), so a slow or hidden view costs the engine nothing but the filling itself.
// `Meta` is what a frame says about itself (its size, ...), kept per slot.
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/interop.h"
#include "core/error.h"
#include "render/picture_renderer.h"

namespace qvl::render {

template <typename Meta> class FrameChannel {
public:
  // share_with_cuda: slots in exportable memory the CUDA backend imports (the device must allow it), beside the
  // mapped ones every channel has (frames filled on the host: a model on the CPU, a layer a plan left there).
  FrameChannel(VulkanDevice& device, uint64_t slot_bytes, bool share_with_cuda)
      : shared_(share_with_cuda), slot_bytes_(aligned_region(slot_bytes)) {
    host_ = std::make_unique<VulkanBuffer>(device, 2 * slot_bytes_, VulkanBuffer::Kind::HostVisible);
    if (shared_) gpu_ = std::make_unique<VulkanBuffer>(device, 2 * slot_bytes_, VulkanBuffer::Kind::Shared);
    written_ = std::make_unique<TimelineSemaphore>(device, shared_);
    read_ = std::make_unique<TimelineSemaphore>(device, false);
  }
  // The facet the imports were made into must still exist (or forget_imports must have been called).
  ~FrameChannel() { forget_imports(); }
  bool shared_with_cuda() const { return shared_; }
  uint64_t slot_bytes() const { return slot_bytes_; }

  // ---- The engine's thread ----
  // Where a frame goes: imported memory at `offset` (facet set) or mapped host memory (host set).
  struct Target {
    DeviceInterop* facet = nullptr;
    InteropHandle memory = 0;
    uint64_t offset = 0;
    uint8_t* host = nullptr;
  };
  // Fills the next slot with `fill`: on the GPU through `facet` when the channel is shared and one is given, else on
  // the host. False when the frame was dropped (the view is reading that slot).
  bool publish(DeviceInterop* facet, const std::function<Meta(const Target&)>& fill) {
    uint64_t number = 0;
    {
      std::lock_guard lock(mutex_);
      number = published_ + 1;
      if (reading_ && reading_ % 2 == number % 2) {
        ++dropped_count_;
        return false;
      }
    }
    const bool on_gpu = shared_ && facet;
    Target target;
    target.offset = (number % 2) * slot_bytes_;
    if (on_gpu) {
      if (facet != facet_) import_into(*facet);
      target.facet = facet;
      target.memory = memory_;
    } else {
      target.host = static_cast<uint8_t*>(host_->mapped()) + target.offset;
    }
    const Meta meta = fill(target);
    if (on_gpu) facet->signal(written_by_cuda_, number);  // the view takes the frame once the GPU reached this
    std::lock_guard lock(mutex_);
    slots_[number % 2] = {meta, on_gpu};
    published_ = number;
    ++published_count_;
    return true;
  }
  // The backend the imports were made into is going away (the model moves): import again on the next publish.
  void forget_imports() {
    if (facet_) {
      facet_->release(memory_);
      facet_->release(written_by_cuda_);
    }
    facet_ = nullptr;
  }

  // ---- The view's thread ----
  struct Frame {
    uint64_t number = 0;
    BufferRange data;  // the whole slot
    Meta meta;
    // Filled on the GPU: the view's submission still waits for written() >= number (already reached, so it costs
    // nothing), which is what makes CUDA's writes visible to Vulkan's reads.
    bool filled_on_gpu = false;
  };
  // The newest frame not shown yet, now marked as being read (nullopt: none, the last one is still being read, or
  // the GPU has not finished filling the newest: the view's queue then never waits on the engine's stream).
  std::optional<Frame> take_newest() {
    std::lock_guard lock(mutex_);
    if (reading_ || published_ == shown_) return std::nullopt;
    const Slot& slot = slots_[published_ % 2];
    if (slot.on_gpu && written_->value() < published_) return std::nullopt;
    reading_ = published_;
    const VulkanBuffer& buffer = slot.on_gpu ? *gpu_ : *host_;
    return Frame{reading_, {buffer.buffer(), (reading_ % 2) * slot_bytes_, slot_bytes_}, slot.meta, slot.on_gpu};
  }
  // The submission that read frame `number` signals read() = number; once it has (or nothing was submitted), the
  // slot may be written again.
  void release(uint64_t number) {
    std::lock_guard lock(mutex_);
    if (reading_ != number) return;
    shown_ = number;
    reading_ = 0;
  }
  // Polls read(): releases the frame being read once the GPU is done with it.
  void release_finished() {
    uint64_t reading = 0;
    {
      std::lock_guard lock(mutex_);
      reading = reading_;
    }
    if (reading && read_->value() >= reading) release(reading);
  }
  // What a submission that reads `frame` waits for (CUDA's `written` point where the GPU filled it: already reached,
  // but naming it is what makes CUDA's writes visible to Vulkan) and signals (`read`, which frees the slot).
  std::vector<CommandSlots::TimelinePoint> waits_for(const Frame& frame) const {
    if (!frame.filled_on_gpu) return {};
    return {{written_->handle(), frame.number}};
  }
  CommandSlots::TimelinePoint read_point(const Frame& frame) const { return {read_->handle(), frame.number}; }
  // A frame's bytes as the host sees them (nullptr for a frame filled on the GPU); valid until it is released.
  const uint8_t* host_bytes(const Frame& frame) const {
    return frame.filled_on_gpu ? nullptr : static_cast<const uint8_t*>(host_->mapped()) + frame.data.offset;
  }
  const TimelineSemaphore& written() const { return *written_; }
  const TimelineSemaphore& read() const { return *read_; }
  uint64_t frames_published() const { return published_count_; }
  uint64_t frames_dropped() const { return dropped_count_; }

private:
  struct Slot {
    Meta meta{};
    bool on_gpu = false;
  };
  // Exports the GPU slots and the semaphore and imports both; a failed import closes what it was not handed.
  void import_into(DeviceInterop& facet) {
    forget_imports();
    const int memory_fd = gpu_->export_fd();
    try {
      memory_ = facet.import_memory(memory_fd, gpu_->allocation_bytes(), gpu_->dedicated());
    } catch (...) {
      close(memory_fd);
      throw;
    }
    const int semaphore_fd = written_->export_fd();
    try {
      written_by_cuda_ = facet.import_timeline_semaphore(semaphore_fd);
    } catch (...) {
      close(semaphore_fd);
      facet.release(memory_);
      throw;
    }
    facet_ = &facet;
  }

  bool shared_ = false;
  uint64_t slot_bytes_ = 0;
  std::unique_ptr<VulkanBuffer> host_, gpu_;
  std::unique_ptr<TimelineSemaphore> written_, read_;

  std::mutex mutex_;  // guards what both threads touch below
  uint64_t published_ = 0, shown_ = 0, reading_ = 0;  // frame numbers (0: none)
  Slot slots_[2]{};
  std::atomic<uint64_t> published_count_{0}, dropped_count_{0};

  // The engine thread's imports (only it touches these).
  DeviceInterop* facet_ = nullptr;
  InteropHandle memory_ = 0, written_by_cuda_ = 0;
};

}  // namespace qvl::render
