#pragma once
// The Vulkan side of qvl-studio's views: one VulkanDevice for the app (ui/render: matched to the CUDA device by
// UUID, so the engine's kernels can draw into its memory), a QVulkanInstance that adopts its VkInstance so Qt can
// make surfaces for windows, and the pool map's channel that the engine's thread feeds.
//
// Why our own VkDevice on a QWindow instead of QVulkanWindow: Qt 6.4 lets a QVulkanWindow enable device extensions
// but not Vulkan 1.2 features, and the interop needs timelineSemaphore (CUDA imports timeline semaphores; binary
// ones would need a new exported semaphore per frame and give the host no way to ask how far the GPU got).
#include <QString>
#include <memory>

#include "ui/engine_worker.h"

class QVulkanInstance;

namespace qvl::render {
class VulkanDevice;
class PoolMapChannel;
class HeatChannel;
}  // namespace qvl::render

namespace qvl::ui {

class VulkanViews {
public:
  // nullptr, with `reason`, when Vulkan cannot draw the views here (built without it, no loader, no device, ...):
  // the views are then drawn by QPainter. $QVL_VULKAN_VALIDATION=1 turns the validation layers on.
  static std::unique_ptr<VulkanViews> create(QString* reason);
  ~VulkanViews();

  render::VulkanDevice& device() { return *device_; }
  QVulkanInstance* instance() { return instance_.get(); }
  const std::shared_ptr<render::PoolMapChannel>& pool_channel() const { return pool_channel_; }
  const std::shared_ptr<render::HeatChannel>& heat_channel() const { return heat_channel_; }
  // Where the pictures come from, said under the view.
  QString source() const;
  // What the engine's worker calls to feed the views: the pool of the GPU the model runs on (drawn by its CUDA kernel
  // into the channel's memory when they share it, else on the host) and each step's attention heat (copied on the
  // GPU, or read back).
  ViewFeed view_feed() const;

private:
  VulkanViews() = default;
  std::unique_ptr<render::VulkanDevice> device_;
  std::unique_ptr<QVulkanInstance> instance_;
  std::shared_ptr<render::PoolMapChannel> pool_channel_;
  std::shared_ptr<render::HeatChannel> heat_channel_;
};

}  // namespace qvl::ui
