#pragma once
// Presenting the views' pixels in a window: a swapchain on a surface the window system made (Qt's
// QVulkanInstance::surfaceForWindow in the app), images filled by a buffer-to-image copy after the compute pass
// that colours them, so the shaders never depend on the swapchain's format (only its channel order). FIFO.
#include <functional>
#include <vector>

#include "render/picture_renderer.h"

namespace qvl::render {

class Swapchain {
public:
  // Throws qvl::Error saying why this surface cannot be presented to (the device's queue cannot, no 8-bit BGRA or
  // RGBA format, images that cannot be copied into). The surface stays the caller's.
  Swapchain(VulkanDevice& device, VkSurfaceKHR surface);
  ~Swapchain();
  Swapchain(const Swapchain&) = delete;
  Swapchain& operator=(const Swapchain&) = delete;

  ChannelOrder order() const { return order_; }
  VkExtent2D extent() const { return extent_; }

  // Records `colour` (the compute pass that writes `pixels`, nothing to re-show old pixels) to run once `waits` are
  // reached, copies the pixels
  // (width x height, clipped to the window, the rest cleared) into the next image and presents it, signalling
  // `signal_points` when the GPU is done. `window` is the window's size in pixels now (the swapchain follows it). False
  // when nothing was presented (a minimised window, or the swapchain was out of date and has been made again).
  bool present(VkExtent2D window, const std::function<void(VkCommandBuffer)>& colour, const BufferRange& pixels,
               uint32_t width, uint32_t height, const std::vector<CommandSlots::TimelinePoint>& waits = {},
               const std::vector<CommandSlots::TimelinePoint>& signal_points = {});
  uint64_t presented() const { return presented_; }

private:
  void create(VkExtent2D window);
  void destroy();

  VulkanDevice& device_;
  VkSurfaceKHR surface_;
  VkSurfaceFormatKHR format_{};
  ChannelOrder order_ = ChannelOrder::Bgra;
  VkSwapchainKHR swapchain_ = VK_NULL_HANDLE;
  VkExtent2D extent_{};
  VkExtent2D made_for_{};  // the window size create() was asked for
  std::vector<VkImage> images_;
  std::vector<VkSemaphore> rendered_;  // one per image: the present waits for its copy
  CommandSlots commands_{device_, 2};
  VkSemaphore acquired_[2] = {};
  uint32_t next_slot_ = 0;
  uint64_t presented_ = 0;
};

}  // namespace qvl::render
