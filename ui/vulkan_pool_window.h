#pragma once
// The pool map drawn by Vulkan: each new PoolMapChannel frame coloured by pool_map.comp at the window's size.
#include "render/pool_map_channel.h"
#include "ui/vulkan_view_window.h"

namespace qvl::ui {

class VulkanPoolWindow : public VulkanViewWindow {
  Q_OBJECT
public:
  explicit VulkanPoolWindow(VulkanViews& views);
  ~VulkanPoolWindow() override;
  PoolMapGeometry shown_geometry() const { return shown_geometry_; }

protected:
  void poll() override;
  void resized(uint32_t width, uint32_t height) override;

private:
  std::shared_ptr<render::PoolMapChannel> channel_;
  PoolMapGeometry shown_geometry_{0, 0, 0};
};

}  // namespace qvl::ui
