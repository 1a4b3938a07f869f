#pragma once
// One Vulkan device for the views: the instance (with the validation layers when asked), the physical device
// chosen to match the CUDA device's UUID where there is one, one queue that computes and copies, and why memory
// cannot be shared with CUDA when it cannot (the views then take a staging upload from the host).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "render/vulkan_api.h"

namespace qvl::render {

struct DeviceRequest {
  std::optional<std::array<uint8_t, 16>> cuda_uuid;  // the CUDA device whose memory the views draw; none: no CUDA
  std::string no_cuda_reason = "no CUDA device";     // said when cuda_uuid is empty
  bool validation = false;                           // VK_LAYER_KHRONOS_validation (refused when not installed)
  std::vector<std::string> instance_extensions;      // e.g. a window system's surface extensions
  bool presents = false;                             // enable VK_KHR_swapchain where the device has it
};

class VulkanDevice {
public:
  // Throws qvl::Error saying why when no Vulkan device can draw the views at all.
  explicit VulkanDevice(const DeviceRequest& request);
  ~VulkanDevice();
  VulkanDevice(const VulkanDevice&) = delete;
  VulkanDevice& operator=(const VulkanDevice&) = delete;

  VulkanApi api;  // this device's entry points
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  std::string name;       // "NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)"
  bool software = false;  // a CPU implementation (lavapipe, SwiftShader)
  bool swapchain = false;  // VK_KHR_swapchain enabled (asked for and present)

  // Empty when memory and semaphores can be shared with the CUDA device; else why not (said in the view).
  const std::string& interop_reason() const { return interop_reason_; }
  bool shares_memory_with_cuda() const { return interop_reason_.empty(); }

  // A memory type among `allowed` with all of `flags` (throws when none).
  uint32_t memory_type(uint32_t allowed, VkMemoryPropertyFlags flags) const;

  // The validation layers' warnings and errors so far (empty without validation, or when they found nothing).
  std::vector<std::string> validation_messages() const;

private:
  struct Messages;
  void create_instance(const DeviceRequest& request);
  void choose_physical_device(const DeviceRequest& request);
  void create_device(const DeviceRequest& request);

  std::string interop_reason_;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::unique_ptr<Messages> messages_;
  VkPhysicalDeviceMemoryProperties memory_{};
};

// The window-system surface extensions the loader offers (VK_KHR_surface and the X11/Wayland ones), for a
// DeviceRequest whose windows present; empty without a loader.
std::vector<std::string> surface_extensions();

// Why a machine's kernel cannot share Vulkan's file descriptors with CUDA (WSL2), or empty.
std::string platform_interop_reason();

}  // namespace qvl::render
