#include "ui/vulkan_heatmap_window.h"

#include <QtConcurrent/QtConcurrentRun>
#include <cstring>

#include "render/vulkan_device.h"
#include "ui/picture_loader.h"
#include "ui/vulkan_views.h"

namespace qvl::ui {

namespace {

// The picture as the shader reads it (RGBA), decoded and scaled off the GUI thread to fill the window.
QImage load_scaled(const QString& path, QSize fit) {
  QImage image = load_scaled_picture(path, fit);
  if (image.isNull()) return {};
  if (image.size() != image.size().scaled(fit, Qt::KeepAspectRatio))  // a small picture fills the window too
    image = image.scaled(fit, Qt::KeepAspectRatio, Qt::SmoothTransformation);
  return image.convertToFormat(QImage::Format_RGBA8888);
}
}  // namespace

VulkanHeatmapWindow::VulkanHeatmapWindow(VulkanViews& views)
    : VulkanViewWindow(views, uint64_t(render::kMaxPictureSide) * render::kMaxPictureSide * 4), channel_(views.heat_channel()) {
  connect(&scaling_, &QFutureWatcher<QImage>::finished, this, [this] {
    const QImage image = scaling_.result();
    picture_.clear();
    picture_width_ = picture_height_ = 0;
    if (image.isNull()) return;
    picture_width_ = uint32_t(image.width());
    picture_height_ = uint32_t(image.height());
    picture_.resize(size_t(picture_width_) * picture_height_);
    for (int y = 0; y < image.height(); ++y)
      std::memcpy(&picture_[size_t(y) * picture_width_], image.constScanLine(y), size_t(picture_width_) * 4);
    try {
      if (!picture_buffer_)
        picture_buffer_ = std::make_unique<render::VulkanBuffer>(views_.device(), uint64_t(render::kMaxPictureSide) * render::kMaxPictureSide * 4,
                                                                 render::VulkanBuffer::Kind::HostVisible);
      // No submission may read the old picture while it is replaced (rare: a new picture or window size).
      views_.device().api.vkQueueWaitIdle(views_.device().queue);
      std::memcpy(picture_buffer_->mapped(), picture_.data(), picture_.size() * 4);
    } catch (const std::exception& e) {
      fail(QString::fromStdString(e.what()));
    }
  });
}

VulkanHeatmapWindow::~VulkanHeatmapWindow() {
  scaling_.waitForFinished();
  retire();  // before picture_buffer_ goes: the last submission may still read it
  channel_->release_finished();
}

void VulkanHeatmapWindow::set_picture(const QString& path) {
  path_ = path;
  scale_picture();
}

void VulkanHeatmapWindow::resized(uint32_t, uint32_t) { scale_picture(); }

void VulkanHeatmapWindow::scale_picture() {
  if (path_.isEmpty()) return;
  const VkExtent2D size = pixel_size();
  const QSize fit(std::clamp(int(size.width), 1, render::kMaxPictureSide), std::clamp(int(size.height), 1, render::kMaxPictureSide));
  scaling_.setFuture(QtConcurrent::run(load_scaled, path_, fit));
}

void VulkanHeatmapWindow::poll() {
  channel_->release_finished();
  if (picture_.empty() || scaling_.isRunning()) return;  // nothing to draw over yet
  const auto frame = channel_->take_newest();
  if (!frame) return;
  const render::HeatmapShape shape{picture_width_, picture_height_, frame->meta.grid_w, frame->meta.grid_h, render::kHeatOpacity};
  const uint64_t bytes = uint64_t(picture_width_) * picture_height_ * 4;
  auto colour = [&](VkCommandBuffer cmd) {
    renderer_->record_heatmap(cmd, {picture_buffer_->buffer(), 0, bytes}, frame->data, {pixels().buffer, 0, bytes},
                              shape, order());
  };
  // What the frame says is set before show(), which emits frameShown (the caption read the previous frame's, and
  // said "0 x 0 patches" for the first); put back if nothing was shown.
  const render::HeatFrameMeta previous_meta = shown_meta_;
  std::vector<float> previous_heat = std::move(shown_heat_);
  shown_meta_ = frame->meta;
  shown_heat_.clear();
  if (const auto* host = channel_->host_bytes(*frame)) {
    const auto* heat = reinterpret_cast<const float*>(host);
    shown_heat_.assign(heat, heat + size_t(frame->meta.grid_w) * frame->meta.grid_h);
  }
  if (!show(colour, picture_width_, picture_height_, channel_->waits_for(*frame), channel_->read_point(*frame),
            frame->number)) {
    shown_meta_ = previous_meta;
    shown_heat_ = std::move(previous_heat);
    channel_->release(frame->number);
  }
}

}  // namespace qvl::ui
