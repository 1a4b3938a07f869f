#include "render/vulkan_memory.h"

#include "core/error.h"

namespace qvl::render {

VulkanBuffer::VulkanBuffer(VulkanDevice& device, uint64_t bytes, Kind kind) : device_(device), kind_(kind), bytes_(bytes) {
  const auto& vk = device.api;
  if (kind == Kind::Shared && !device.shares_memory_with_cuda())
    fail("Vulkan: memory cannot be shared with CUDA here: ", device.interop_reason());
  VkExternalMemoryBufferCreateInfo external{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  external.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, kind == Kind::Shared ? &external : nullptr};
  info.size = bytes;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  vk_check(vk.vkCreateBuffer(device.device, &info, nullptr, &buffer_), "creating a buffer");
  VkMemoryDedicatedRequirements dedicated{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS};
  VkMemoryRequirements2 needs2{VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2, &dedicated};
  VkBufferMemoryRequirementsInfo2 which{VK_STRUCTURE_TYPE_BUFFER_MEMORY_REQUIREMENTS_INFO_2};
  which.buffer = buffer_;
  vk.vkGetBufferMemoryRequirements2(device.device, &which, &needs2);
  const VkMemoryRequirements& needs = needs2.memoryRequirements;
  allocation_bytes_ = needs.size;
  dedicated_ = kind == Kind::Shared && (dedicated.requiresDedicatedAllocation || dedicated.prefersDedicatedAllocation);
  VkMemoryDedicatedAllocateInfo dedicated_info{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO};
  dedicated_info.buffer = buffer_;
  VkExportMemoryAllocateInfo export_info{VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO, dedicated_ ? &dedicated_info : nullptr};
  export_info.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, kind == Kind::Shared ? &export_info : nullptr};
  alloc.allocationSize = needs.size;
  const VkMemoryPropertyFlags flags = kind == Kind::Shared
                                          ? VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
                                          : VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  try {
    alloc.memoryTypeIndex = device.memory_type(needs.memoryTypeBits, flags);
    vk_check(vk.vkAllocateMemory(device.device, &alloc, nullptr, &memory_), "allocating buffer memory");
    vk_check(vk.vkBindBufferMemory(device.device, buffer_, memory_, 0), "binding buffer memory");
    if (kind == Kind::HostVisible)
      vk_check(vk.vkMapMemory(device.device, memory_, 0, VK_WHOLE_SIZE, 0, &mapped_), "mapping buffer memory");
  } catch (...) {
    if (memory_) vk.vkFreeMemory(device.device, memory_, nullptr);
    vk.vkDestroyBuffer(device.device, buffer_, nullptr);
    throw;
  }
}

VulkanBuffer::~VulkanBuffer() {
  const auto& vk = device_.api;
  if (mapped_) vk.vkUnmapMemory(device_.device, memory_);
  vk.vkDestroyBuffer(device_.device, buffer_, nullptr);
  vk.vkFreeMemory(device_.device, memory_, nullptr);
}

int VulkanBuffer::export_fd() const {
  if (kind_ != Kind::Shared) fail("Vulkan: only shared buffers can be exported");
  VkMemoryGetFdInfoKHR info{VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR};
  info.memory = memory_;
  info.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  int fd = -1;
  vk_check(device_.api.vkGetMemoryFdKHR(device_.device, &info, &fd), "exporting memory (vkGetMemoryFdKHR)");
  return fd;
}

TimelineSemaphore::TimelineSemaphore(VulkanDevice& device, bool exportable) : device_(device), exportable_(exportable) {
  if (exportable && !device.shares_memory_with_cuda())
    fail("Vulkan: semaphores cannot be shared with CUDA here: ", device.interop_reason());
  VkExportSemaphoreCreateInfo export_info{VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO};
  export_info.handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, exportable ? &export_info : nullptr};
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = 0;
  VkSemaphoreCreateInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type};
  vk_check(device.api.vkCreateSemaphore(device.device, &info, nullptr, &semaphore_), "creating a timeline semaphore");
}

TimelineSemaphore::~TimelineSemaphore() { device_.api.vkDestroySemaphore(device_.device, semaphore_, nullptr); }

uint64_t TimelineSemaphore::value() const {
  uint64_t value = 0;
  vk_check(device_.api.vkGetSemaphoreCounterValue(device_.device, semaphore_, &value), "reading a timeline semaphore");
  return value;
}

bool TimelineSemaphore::wait(uint64_t value, uint64_t timeout_ns) const {
  VkSemaphoreWaitInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  info.semaphoreCount = 1;
  info.pSemaphores = &semaphore_;
  info.pValues = &value;
  const VkResult result = device_.api.vkWaitSemaphores(device_.device, &info, timeout_ns);
  if (result == VK_TIMEOUT) return false;
  vk_check(result, "waiting for a timeline semaphore");
  return true;
}

int TimelineSemaphore::export_fd() const {
  if (!exportable_) fail("Vulkan: this semaphore was not made exportable");
  VkSemaphoreGetFdInfoKHR info{VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR};
  info.semaphore = semaphore_;
  info.handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  int fd = -1;
  vk_check(device_.api.vkGetSemaphoreFdKHR(device_.device, &info, &fd), "exporting a semaphore (vkGetSemaphoreFdKHR)");
  return fd;
}

}  // namespace qvl::render
