#pragma once
// The Vulkan entry points the renderer uses, loaded at run time from the system's loader (libvulkan.so.1) rather
// than linked: qvl and qvl-studio must start on machines without a Vulkan loader, and say why the views fall back.
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace qvl::render {

#define QVL_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)              \
  X(vkEnumerateInstanceExtensionProperties) \
  X(vkEnumerateInstanceLayerProperties)     \
  X(vkEnumerateInstanceVersion)

#define QVL_VK_INSTANCE_FUNCTIONS(X)             \
  X(vkDestroyInstance)                           \
  X(vkEnumeratePhysicalDevices)                  \
  X(vkEnumeratePhysicalDeviceGroups)             \
  X(vkGetPhysicalDeviceProperties)               \
  X(vkGetPhysicalDeviceProperties2)              \
  X(vkGetPhysicalDeviceFeatures2)                \
  X(vkGetPhysicalDeviceQueueFamilyProperties)    \
  X(vkGetPhysicalDeviceMemoryProperties)         \
  X(vkEnumerateDeviceExtensionProperties)        \
  X(vkCreateDevice)                              \
  X(vkGetDeviceProcAddr)                         \
  X(vkCreateDebugUtilsMessengerEXT)              \
  X(vkDestroyDebugUtilsMessengerEXT)             \
  X(vkGetPhysicalDeviceSurfaceSupportKHR)        \
  X(vkGetPhysicalDeviceSurfaceCapabilitiesKHR)   \
  X(vkGetPhysicalDeviceSurfaceFormatsKHR)

#define QVL_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)               \
  X(vkGetDeviceQueue)              \
  X(vkDeviceWaitIdle)              \
  X(vkQueueSubmit)                 \
  X(vkQueueWaitIdle)               \
  X(vkCreateBuffer)                \
  X(vkDestroyBuffer)               \
  X(vkGetBufferMemoryRequirements2) \
  X(vkAllocateMemory)              \
  X(vkFreeMemory)                  \
  X(vkBindBufferMemory)            \
  X(vkMapMemory)                   \
  X(vkUnmapMemory)                 \
  X(vkCreateSemaphore)             \
  X(vkDestroySemaphore)            \
  X(vkWaitSemaphores)              \
  X(vkGetSemaphoreCounterValue)    \
  X(vkSignalSemaphore)             \
  X(vkCreateFence)                 \
  X(vkDestroyFence)                \
  X(vkWaitForFences)               \
  X(vkResetFences)                 \
  X(vkCreateCommandPool)           \
  X(vkDestroyCommandPool)          \
  X(vkAllocateCommandBuffers)      \
  X(vkFreeCommandBuffers)          \
  X(vkBeginCommandBuffer)          \
  X(vkEndCommandBuffer)            \
  X(vkResetCommandBuffer)          \
  X(vkCreateShaderModule)          \
  X(vkDestroyShaderModule)         \
  X(vkCreateDescriptorSetLayout)   \
  X(vkDestroyDescriptorSetLayout)  \
  X(vkCreatePipelineLayout)        \
  X(vkDestroyPipelineLayout)       \
  X(vkCreateComputePipelines)      \
  X(vkDestroyPipeline)             \
  X(vkCmdBindPipeline)             \
  X(vkCmdPushConstants)            \
  X(vkCmdPushDescriptorSetKHR)     \
  X(vkCmdDispatch)                 \
  X(vkCmdPipelineBarrier)          \
  X(vkCmdCopyBuffer)               \
  X(vkCmdFillBuffer)               \
  X(vkGetMemoryFdKHR)              \
  X(vkGetSemaphoreFdKHR)           \
  X(vkCreateSwapchainKHR)          \
  X(vkDestroySwapchainKHR)         \
  X(vkGetSwapchainImagesKHR)       \
  X(vkAcquireNextImageKHR)         \
  X(vkQueuePresentKHR)             \
  X(vkCmdCopyBufferToImage)        \
  X(vkCmdClearColorImage)

// Function pointers, filled in three steps: the loader's global ones, then per instance, then per device (an entry
// point an extension did not provide stays null; the device code checks extensions before it uses one).
struct VulkanApi {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
#define QVL_VK_DECLARE(name) PFN_##name name = nullptr;
  QVL_VK_GLOBAL_FUNCTIONS(QVL_VK_DECLARE)
  QVL_VK_INSTANCE_FUNCTIONS(QVL_VK_DECLARE)
  QVL_VK_DEVICE_FUNCTIONS(QVL_VK_DECLARE)
#undef QVL_VK_DECLARE

  void load_instance(VkInstance instance);
  void load_device(VkDevice device);
};

// The loader, opened once per process ($QVL_VULKAN_LOADER names another file; an empty value means none, for
// tests). nullptr with `reason` set when there is none.
const VulkanApi* vulkan_api(std::string* reason);

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.
const char* vk_result_name(VkResult result);
// Throws qvl::Error naming `what` unless `result` is VK_SUCCESS.
void vk_check(VkResult result, const char* what);

}  // namespace qvl::render
