#include "ui/vulkan_pool_window.h"

#include "ui/vulkan_views.h"

namespace qvl::ui {

VulkanPoolWindow::VulkanPoolWindow(VulkanViews& views)
    : VulkanViewWindow(views, uint64_t(render::PoolMapChannel::kMaxWidth) * render::PoolMapChannel::kMaxHeight * 4),
      channel_(views.pool_channel()) {}

VulkanPoolWindow::~VulkanPoolWindow() {
  retire();                      // the frame being shown is read to the end ...
  channel_->release_finished();  // ... so its slot is free again
}

void VulkanPoolWindow::resized(uint32_t width, uint32_t height) {
  if (height < uint32_t(render::kPoolBarHeight + 2)) return;
  channel_->set_geometry({int(width), int(height), render::kPoolBarHeight});
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
  // Set before show(), which emits frameShown; put back if nothing was shown.
  const PoolMapGeometry previous = shown_geometry_;
  shown_geometry_ = g;
  if (!show(colour, uint32_t(g.width), uint32_t(g.height), channel_->waits_for(*frame), channel_->read_point(*frame),
            frame->number)) {
    shown_geometry_ = previous;
    channel_->release(frame->number);
  }
}

}  // namespace qvl::ui
