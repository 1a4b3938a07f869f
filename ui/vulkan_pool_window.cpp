#include "ui/vulkan_pool_window.h"

#include "ui/vulkan_views.h"

namespace qvl::ui {

namespace {
constexpr int kBarHeight = 14;  // rows of the occupancy bar
}  // namespace

VulkanPoolWindow::VulkanPoolWindow(VulkanViews& views)
    : VulkanViewWindow(views, uint64_t(render::PoolMapChannel::kMaxWidth) * render::PoolMapChannel::kMaxHeight * 4),
      channel_(views.pool_channel()) {}

VulkanPoolWindow::~VulkanPoolWindow() {
  retire();                      // the frame being shown is read to the end ...
  channel_->release_finished();  // ... so its slot is free again
}

void VulkanPoolWindow::resized(uint32_t width, uint32_t height) {
  if (height < uint32_t(kBarHeight + 2)) return;
  channel_->set_geometry({int(width), int(height), kBarHeight});
}

void VulkanPoolWindow::poll() {
  channel_->release_finished();
  const auto frame = channel_->take_newest();
  if (!frame) return;
  const PoolMapGeometry g = frame->meta.geometry;
  const uint64_t bytes = uint64_t(g.width) * g.height * 4;
  auto colour = [&](VkCommandBuffer cmd) {
    renderer_->record_pool_map(cmd, frame->data, {pixels().buffer, 0, bytes}, g, frame->meta.capacity_column, order());
  };
  const render::CommandSlots::TimelinePoint done{channel_->read().handle(), frame->number};
  const bool shown = frame->filled_on_gpu
                         ? show(colour, uint32_t(g.width), uint32_t(g.height), {{channel_->written().handle(), frame->number}}, done, frame->number)
                         : show(colour, uint32_t(g.width), uint32_t(g.height), {}, done, frame->number);
  if (!shown) channel_->release(frame->number);
  else shown_geometry_ = g;
}

}  // namespace qvl::ui
