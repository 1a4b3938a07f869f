#pragma once
// Buffers and timeline semaphores of a VulkanDevice, exportable to CUDA as opaque file descriptors.
#include <cstdint>

#include "render/vulkan_device.h"

namespace qvl::render {

class VulkanBuffer {
public:
  enum class Kind {
    HostVisible,  // mapped, coherent: uploads, read-back, the fallback's staging
    Shared,       // device-local and exportable (VK_KHR_external_memory_fd): CUDA writes it
  };
  VulkanBuffer(VulkanDevice& device, uint64_t bytes, Kind kind);
  ~VulkanBuffer();
  VulkanBuffer(const VulkanBuffer&) = delete;
  VulkanBuffer& operator=(const VulkanBuffer&) = delete;

  VkBuffer buffer() const { return buffer_; }
  uint64_t bytes() const { return bytes_; }
  // What the driver allocated (>= bytes): the size an importer must name.
  uint64_t allocation_bytes() const { return allocation_bytes_; }
  void* mapped() const { return mapped_; }  // HostVisible only
  // A new descriptor for the memory (Shared only); the caller owns it until an importer takes it.
  int export_fd() const;
  // The driver asked for a dedicated allocation (an importer must be told).
  bool dedicated() const { return dedicated_; }

private:
  VulkanDevice& device_;
  Kind kind_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  uint64_t bytes_ = 0, allocation_bytes_ = 0;
  void* mapped_ = nullptr;
  bool dedicated_ = false;
};

class TimelineSemaphore {
public:
  TimelineSemaphore(VulkanDevice& device, bool exportable);
  ~TimelineSemaphore();
  TimelineSemaphore(const TimelineSemaphore&) = delete;
  TimelineSemaphore& operator=(const TimelineSemaphore&) = delete;

  VkSemaphore handle() const { return semaphore_; }
  uint64_t value() const;
  // False when `timeout_ns` passed first.
  bool wait(uint64_t value, uint64_t timeout_ns) const;
  int export_fd() const;  // exportable only; the caller owns it until an importer takes it

private:
  VulkanDevice& device_;
  VkSemaphore semaphore_ = VK_NULL_HANDLE;
  bool exportable_ = false;
};

// Offsets of buffer regions the shaders bind must be multiples of this (minStorageBufferOffsetAlignment is at most
// 256 on every implementation).
constexpr uint64_t kRegionAlignment = 256;
constexpr uint64_t aligned_region(uint64_t bytes) { return (bytes + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment; }

}  // namespace qvl::render
