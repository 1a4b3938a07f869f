#include "render/swapchain.h"

#include <algorithm>

#include "core/error.h"

namespace qvl::render {

namespace {

VkSemaphore binary_semaphore(VulkanDevice& device) {
  VkSemaphoreCreateInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  VkSemaphore s = VK_NULL_HANDLE;
  vk_check(device.api.vkCreateSemaphore(device.device, &info, nullptr, &s), "creating a semaphore");
  return s;
}

void image_barrier(const VulkanApi& vk, VkCommandBuffer cmd, VkImage image, VkImageLayout from, VkImageLayout to,
                   VkAccessFlags src_access, VkAccessFlags dst_access, VkPipelineStageFlags src, VkPipelineStageFlags dst) {
  VkImageMemoryBarrier b{VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
  b.srcAccessMask = src_access;
  b.dstAccessMask = dst_access;
  b.oldLayout = from;
  b.newLayout = to;
  b.srcQueueFamilyIndex = b.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
  b.image = image;
  b.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
  vk.vkCmdPipelineBarrier(cmd, src, dst, 0, 0, nullptr, 0, nullptr, 1, &b);
}

}  // namespace

Swapchain::Swapchain(VulkanDevice& device, VkSurfaceKHR surface) : device_(device), surface_(surface) {
  const auto& vk = device.api;
  if (!device.swapchain) fail("the Vulkan device ", device.name, " cannot present (no VK_KHR_swapchain)");
  VkBool32 supported = VK_FALSE;
  vk_check(vk.vkGetPhysicalDeviceSurfaceSupportKHR(device.physical, device.queue_family, surface, &supported),
           "asking whether the queue presents to the window");
  if (!supported) fail("the Vulkan queue of ", device.name, " cannot present to this window");
  uint32_t count = 0;
  vk.vkGetPhysicalDeviceSurfaceFormatsKHR(device.physical, surface, &count, nullptr);
  std::vector<VkSurfaceFormatKHR> formats(count);
  vk.vkGetPhysicalDeviceSurfaceFormatsKHR(device.physical, surface, &count, formats.data());
  // 8-bit formats take the coloured bytes as they are (the palettes are display colours either way).
  const VkFormat wanted[] = {VK_FORMAT_B8G8R8A8_UNORM, VK_FORMAT_R8G8B8A8_UNORM, VK_FORMAT_B8G8R8A8_SRGB,
                             VK_FORMAT_R8G8B8A8_SRGB};
  bool found = false;
  for (VkFormat f : wanted) {
    const auto it = std::find_if(formats.begin(), formats.end(), [&](const VkSurfaceFormatKHR& s) { return s.format == f; });
    if (it == formats.end()) continue;
    format_ = *it;
    order_ = (f == VK_FORMAT_B8G8R8A8_UNORM || f == VK_FORMAT_B8G8R8A8_SRGB) ? ChannelOrder::Bgra : ChannelOrder::Rgba;
    found = true;
    break;
  }
  if (!found) fail("the window offers no 8-bit BGRA or RGBA swapchain format");
  for (auto& s : acquired_) s = binary_semaphore(device);
}

Swapchain::~Swapchain() {
  commands_.wait_all();
  device_.api.vkQueueWaitIdle(device_.queue);
  destroy();
  for (VkSemaphore s : acquired_) device_.api.vkDestroySemaphore(device_.device, s, nullptr);
}

void Swapchain::destroy() {
  for (VkSemaphore s : rendered_) device_.api.vkDestroySemaphore(device_.device, s, nullptr);
  rendered_.clear();
  images_.clear();
  if (swapchain_) device_.api.vkDestroySwapchainKHR(device_.device, swapchain_, nullptr);
  swapchain_ = VK_NULL_HANDLE;
  extent_ = {};
  made_for_ = {};
}

void Swapchain::create(VkExtent2D window) {
  const auto& vk = device_.api;
  commands_.wait_all();
  vk.vkQueueWaitIdle(device_.queue);
  VkSurfaceCapabilitiesKHR caps{};
  vk_check(vk.vkGetPhysicalDeviceSurfaceCapabilitiesKHR(device_.physical, surface_, &caps), "reading the surface");
  if (!(caps.supportedUsageFlags & VK_IMAGE_USAGE_TRANSFER_DST_BIT))
    fail("the window's swapchain images cannot be copied into");
  VkExtent2D extent = caps.currentExtent.width != UINT32_MAX ? caps.currentExtent : window;
  extent.width = std::clamp(extent.width, caps.minImageExtent.width, caps.maxImageExtent.width);
  extent.height = std::clamp(extent.height, caps.minImageExtent.height, caps.maxImageExtent.height);
  VkSwapchainKHR old = swapchain_;
  VkSwapchainCreateInfoKHR info{VK_STRUCTURE_TYPE_SWAPCHAIN_CREATE_INFO_KHR};
  info.surface = surface_;
  info.minImageCount = std::max(caps.minImageCount, 2u);
  if (caps.maxImageCount) info.minImageCount = std::min(info.minImageCount + 1, caps.maxImageCount);
  info.imageFormat = format_.format;
  info.imageColorSpace = format_.colorSpace;
  info.imageExtent = extent;
  info.imageArrayLayers = 1;
  info.imageUsage = VK_IMAGE_USAGE_TRANSFER_DST_BIT;
  info.imageSharingMode = VK_SHARING_MODE_EXCLUSIVE;
  info.preTransform = caps.currentTransform;
  info.compositeAlpha = (caps.supportedCompositeAlpha & VK_COMPOSITE_ALPHA_OPAQUE_BIT_KHR)
                            ? VK_COMPOSITE_ALPHA_OPAQUE_BIT_KHR
                            : static_cast<VkCompositeAlphaFlagBitsKHR>(caps.supportedCompositeAlpha & -caps.supportedCompositeAlpha);
  // FIFO, which every driver has: frames come at most every 16 ms (the poll), so a present rarely waits for a
  // vertical blank.
  info.presentMode = VK_PRESENT_MODE_FIFO_KHR;
  info.clipped = VK_TRUE;
  info.oldSwapchain = old;
  VkSwapchainKHR made = VK_NULL_HANDLE;
  vk_check(vk.vkCreateSwapchainKHR(device_.device, &info, nullptr, &made), "creating the swapchain");
  destroy();  // the old one (retired by the new one's creation)
  swapchain_ = made;
  extent_ = extent;
  made_for_ = window;
  uint32_t count = 0;
  vk.vkGetSwapchainImagesKHR(device_.device, swapchain_, &count, nullptr);
  images_.resize(count);
  vk.vkGetSwapchainImagesKHR(device_.device, swapchain_, &count, images_.data());
  for (uint32_t i = 0; i < count; ++i) rendered_.push_back(binary_semaphore(device_));
}

bool Swapchain::present(VkExtent2D window, const std::function<void(VkCommandBuffer)>& colour, const BufferRange& pixels,
                        uint32_t width, uint32_t height, const std::vector<CommandSlots::TimelinePoint>& waits,
                        const std::vector<CommandSlots::TimelinePoint>& signal_points) {
  const auto& vk = device_.api;
  if (window.width == 0 || window.height == 0) return false;
  // Compared with the size it was made for, not its extent (clamped to the surface's limits, it may never equal a
  // window size, which would make it again at every present).
  if (!swapchain_ || window.width != made_for_.width || window.height != made_for_.height) create(window);
  const uint32_t slot = next_slot_;
  commands_.wait_all();  // the acquire semaphore of this slot is free again
  uint32_t image = 0;
  const VkResult acquired = vk.vkAcquireNextImageKHR(device_.device, swapchain_, UINT64_MAX, acquired_[slot], VK_NULL_HANDLE, &image);
  if (acquired == VK_ERROR_OUT_OF_DATE_KHR) {
    create(window);
    return false;
  }
  if (acquired != VK_SUBOPTIMAL_KHR) vk_check(acquired, "acquiring a swapchain image");
  VkCommandBuffer cmd = commands_.begin(slot);
  colour(cmd);
  const VkImage target = images_[image];
  // From the stage the acquire semaphore is waited at (transfer), so the transition comes after the presentation
  // engine has let the image go.
  image_barrier(vk, cmd, target, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 0,
                VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT);
  const VkClearColorValue background{{0.094f, 0.102f, 0.125f, 1.0f}};
  const VkImageSubresourceRange whole{VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
  vk.vkCmdClearColorImage(cmd, target, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, &background, 1, &whole);
  VkMemoryBarrier after_clear{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  after_clear.srcAccessMask = after_clear.dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  vk.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &after_clear, 0,
                          nullptr, 0, nullptr);
  if (width && height && pixels.buffer) {
    VkBufferImageCopy copy{};
    copy.bufferOffset = pixels.offset;
    copy.bufferRowLength = width;
    copy.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
    copy.imageExtent = {std::min(width, extent_.width), std::min(height, extent_.height), 1};
    vk.vkCmdCopyBufferToImage(cmd, pixels.buffer, target, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &copy);
  }
  image_barrier(vk, cmd, target, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_PRESENT_SRC_KHR,
                VK_ACCESS_TRANSFER_WRITE_BIT, 0, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT);
  commands_.end(slot);
  std::vector<CommandSlots::TimelinePoint> all_signals{{rendered_[image], 0}};
  all_signals.insert(all_signals.end(), signal_points.begin(), signal_points.end());
  std::vector<CommandSlots::TimelinePoint> all_waits{{acquired_[slot], 0}};
  all_waits.insert(all_waits.end(), waits.begin(), waits.end());
  commands_.submit(slot, all_waits, all_signals);
  VkPresentInfoKHR info{VK_STRUCTURE_TYPE_PRESENT_INFO_KHR};
  info.waitSemaphoreCount = 1;
  info.pWaitSemaphores = &rendered_[image];
  info.swapchainCount = 1;
  info.pSwapchains = &swapchain_;
  info.pImageIndices = &image;
  const VkResult shown = vk.vkQueuePresentKHR(device_.queue, &info);
  next_slot_ = (slot + 1) % 2;
  if (shown == VK_ERROR_OUT_OF_DATE_KHR) {
    create(window);
    return false;
  }
  if (shown != VK_SUBOPTIMAL_KHR) vk_check(shown, "presenting (vkQueuePresentKHR)");
  ++presented_;
  if (shown == VK_SUBOPTIMAL_KHR) create(window);
  return true;
}

}  // namespace qvl::render
