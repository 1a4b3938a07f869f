#include "render/pool_map_channel.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace qvl::render {

PoolMapChannel::PoolMapChannel(VulkanDevice& device, bool share_with_cuda) : device_(device), shared_(share_with_cuda) {
  slot_bytes_ = aligned_region(uint64_t(kMaxWidth) * kMaxHeight);
  buffer_ = std::make_unique<VulkanBuffer>(device, 2 * slot_bytes_,
                                           shared_ ? VulkanBuffer::Kind::Shared : VulkanBuffer::Kind::HostVisible);
  written_ = std::make_unique<TimelineSemaphore>(device, shared_);
  read_ = std::make_unique<TimelineSemaphore>(device, false);
}

PoolMapChannel::~PoolMapChannel() { forget_imports(); }

void PoolMapChannel::forget_imports() {
  if (facet_) {
    facet_->release(memory_);
    facet_->release(written_by_cuda_);
  }
  facet_ = nullptr;
}

bool PoolMapChannel::publish(const MemoryReport& report, DeviceInterop* facet) {
  uint64_t number = 0;
  PoolMapGeometry geometry;
  {
    std::lock_guard lock(mutex_);
    number = published_ + 1;
    if (reading_ && reading_ % 2 == number % 2) {
      ++dropped_count_;
      return false;
    }
    geometry = geometry_;
  }
  const uint64_t offset = (number % 2) * slot_bytes_;
  Slot slot{geometry, pool_map_capacity_column(report, geometry), shared_ && facet};
  if (slot.by_cuda) {
    if (facet != facet_) {
      forget_imports();
      const int memory_fd = buffer_->export_fd(), semaphore_fd = written_->export_fd();
      memory_ = facet->import_memory(memory_fd, buffer_->allocation_bytes());
      written_by_cuda_ = facet->import_timeline_semaphore(semaphore_fd);
      facet_ = facet;
    }
    facet->draw_pool_map(report, geometry, memory_, offset);
    facet->signal(written_by_cuda_, number);  // the view's queue waits for this on the GPU
  } else {
    if (shared_) fail("pool map: the channel's memory is on the GPU; the host cannot draw into it");
    const auto codes = draw_pool_map(pool_map_table(report), geometry);
    std::memcpy(static_cast<uint8_t*>(buffer_->mapped()) + offset, codes.data(), codes.size());
  }
  std::lock_guard lock(mutex_);
  slots_[number % 2] = slot;
  published_ = number;
  ++published_count_;
  return true;
}

void PoolMapChannel::set_geometry(const PoolMapGeometry& g) {
  PoolMapGeometry clamped{std::clamp(g.width, 1, kMaxWidth), std::clamp(g.height, g.bar_height + 2, kMaxHeight),
                          g.bar_height};
  check_pool_map_geometry(clamped);
  std::lock_guard lock(mutex_);
  geometry_ = clamped;
}

std::optional<PoolMapChannel::Frame> PoolMapChannel::take_newest() {
  std::lock_guard lock(mutex_);
  if (reading_ || published_ == shown_) return std::nullopt;
  // A frame CUDA has not finished drawing is left for a later look: the view's queue then never waits on the GPU
  // for the engine's stream (a Vulkan submission blocked on CUDA holds the GPU between two contexts).
  if (slots_[published_ % 2].by_cuda && written_->value() < published_) return std::nullopt;
  reading_ = published_;
  const Slot& slot = slots_[reading_ % 2];
  Frame f;
  f.number = reading_;
  f.codes = {buffer_->buffer(), (reading_ % 2) * slot_bytes_, uint64_t(slot.geometry.width) * slot.geometry.height};
  f.geometry = slot.geometry;
  f.capacity_column = slot.capacity_column;
  f.wait_for_cuda = slot.by_cuda;
  return f;
}

void PoolMapChannel::release(uint64_t number) {
  std::lock_guard lock(mutex_);
  if (reading_ != number) return;
  shown_ = number;
  reading_ = 0;
}

void PoolMapChannel::release_finished() {
  uint64_t reading = 0;
  {
    std::lock_guard lock(mutex_);
    reading = reading_;
  }
  if (reading && read_->value() >= reading) release(reading);
}

}  // namespace qvl::render
