#pragma once
// One Vulkan device for the views: the instance (with the validation layers when asked), the physical device
// chosen to match the CUDA device's UUID where there is one, one queue that computes and copies, and why memory
// cannot be shared with CUDA when it cannot (the views then take a staging upload from the host).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "render/vulkan_api.h"

namespace qvl::render {

// Whether a device's queue family can present to the app's display (asked of the window system without a window,
// e.g. vkGetPhysicalDeviceXcbPresentationSupportKHR); nullopt: not known (then the swapchain finds out).
using PresentationProbe =
    std::function<std::optional<bool>(const VulkanApi&, VkInstance, VkPhysicalDevice, uint32_t queue_family)>;

struct DeviceRequest {
  std::optional<std::array<uint8_t, 16>> cuda_uuid;  // the CUDA device whose memory the views draw; none: no CUDA
  std::string no_cuda_reason = "no CUDA device";     // said when cuda_uuid is empty
  bool validation = false;                           // VK_LAYER_KHRONOS_validation (refused when not installed)
  std::vector<std::string> instance_extensions;      // e.g. a window system's surface extensions
  bool presents = false;                             // enable VK_KHR_swapchain where the device has it
  PresentationProbe presentation;                    // where given: prefer a device that can show the views
};

// What the choice of a device knows of each one: read from the driver (VulkanDevice), or made up to test the
// machines this one is not (a hybrid laptop, an old driver, WSL2).
struct DeviceFacts {
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t api_version = 0;
  std::array<uint8_t, 16> uuid{};
  std::vector<std::string> extensions;
  bool timeline = false;         // VkPhysicalDeviceVulkan12Features::timelineSemaphore
  int64_t queue_family = -1;     // the first that computes (and copies)
  uint32_t group_size = 1;       // GPUs in its device group
  std::optional<bool> presents;  // its queue family can present to the display (nullopt: not asked)
  bool has(const char* extension) const;
  std::string unusable() const;  // empty when the views can be drawn on it at all, else why not
};

struct DeviceChoice {
  size_t index = 0;            // into the facts
  std::string interop_reason;  // empty: memory and semaphores are shared with the CUDA device
};

// The device the views draw on: the CUDA device itself where the driver can share its memory and it can show them
// (else the reason, and a device that can show them fed from the host), otherwise the best other one (discrete,
// integrated, virtual, CPU). platform_reason: why this machine cannot share at all (platform_interop_reason()).
// Throws qvl::Error naming each device's shortcoming when none can draw.
DeviceChoice choose_device(const std::vector<DeviceFacts>& devices, const DeviceRequest& request,
                           const std::string& platform_reason);

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

// Why a machine's kernel cannot share Vulkan's file descriptors with CUDA (WSL2), or empty; from the text of
// /proc/sys/kernel/osrelease (read when not given).
std::string platform_interop_reason(std::optional<std::string> kernel_release = std::nullopt);

}  // namespace qvl::render
