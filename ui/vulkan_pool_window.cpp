#include "ui/vulkan_pool_window.h"

#include <QExposeEvent>
#include <QGuiApplication>
#include <QVulkanInstance>
#include <cstring>

#include "render/swapchain.h"
#include "ui/vulkan_views.h"

namespace qvl::ui {

namespace {
constexpr int kPollMs = 16;       // a look at the channel: the engine publishes at most every 33 ms
constexpr int kBarHeight = 14;    // rows of the occupancy bar
}  // namespace

VulkanPoolWindow::VulkanPoolWindow(VulkanViews& views) : views_(views), channel_(views.pool_channel()) {
  setSurfaceType(QSurface::VulkanSurface);
  setVulkanInstance(views.instance());
  try {
    renderer_ = std::make_unique<render::PictureRenderer>(views.device());
    pixels_ = std::make_unique<render::VulkanBuffer>(
        views.device(), uint64_t(render::PoolMapChannel::kMaxWidth) * render::PoolMapChannel::kMaxHeight * 4,
        render::VulkanBuffer::Kind::HostVisible);
  } catch (const std::exception& e) {
    failed_ = true;
    QTimer::singleShot(0, this, [this, why = QString::fromStdString(e.what())] { emit failed(why); });
  }
  connect(&poll_timer_, &QTimer::timeout, this, &VulkanPoolWindow::poll);
  poll_timer_.start(kPollMs);
}

VulkanPoolWindow::~VulkanPoolWindow() {
  poll_timer_.stop();
  swapchain_.reset();  // waits for its submissions (they signal the channel's read semaphore)
  if (channel_) channel_->release_finished();
}

render::ChannelOrder VulkanPoolWindow::order() const {
  return swapchain_ ? swapchain_->order() : render::ChannelOrder::Bgra;
}

std::vector<uint32_t> VulkanPoolWindow::shown_pixels() const {
  const auto* p = static_cast<const uint32_t*>(pixels_->mapped());
  return {p, p + size_t(shown_geometry_.width) * shown_geometry_.height};
}

VkExtent2D VulkanPoolWindow::pixel_size() const {
  const qreal ratio = devicePixelRatio();
  return {uint32_t(width() * ratio), uint32_t(height() * ratio)};
}

void VulkanPoolWindow::fail(const QString& reason) {
  if (failed_) return;
  failed_ = true;
  poll_timer_.stop();
  emit failed(reason);
}

void VulkanPoolWindow::exposeEvent(QExposeEvent*) {
  if (failed_ || !isExposed()) return;
  if (!swapchain_) {
    const VkSurfaceKHR surface = QVulkanInstance::surfaceForWindow(this);
    if (!surface) return fail("this display gives Vulkan no surface (Qt platform \"" + QGuiApplication::platformName() + "\")");
    try {
      swapchain_ = std::make_unique<render::Swapchain>(views_.device(), surface);
    } catch (const std::exception& e) {
      return fail(QString::fromStdString(e.what()));
    }
    emit frameWanted();
  }
  present(nullptr);
}

void VulkanPoolWindow::resizeEvent(QResizeEvent*) {
  if (failed_) return;
  const VkExtent2D size = pixel_size();
  if (size.width == 0 || size.height < uint32_t(kBarHeight + 2)) return;
  channel_->set_geometry({int(size.width), int(size.height), kBarHeight});
  emit frameWanted();
}

void VulkanPoolWindow::poll() {
  if (failed_ || !swapchain_ || !isExposed()) return;
  channel_->release_finished();
  const auto frame = channel_->take_newest();
  if (frame) present(&*frame);
}

void VulkanPoolWindow::present(const render::PoolMapChannel::Frame* frame) {
  try {
    const uint64_t row_bytes = frame ? uint64_t(frame->geometry.width) * frame->geometry.height * 4 : 0;
    auto colour = [&](VkCommandBuffer cmd) {
      if (frame)
        renderer_->record_pool_map(cmd, frame->codes, {pixels_->buffer(), 0, row_bytes}, frame->geometry,
                                   frame->capacity_column, swapchain_->order());
    };
    const PoolMapGeometry geometry = frame ? frame->geometry : shown_geometry_;
    const render::BufferRange pixels{pixels_->buffer(), 0, pixels_->bytes()};
    const uint32_t w = uint32_t(geometry.width), h = uint32_t(geometry.height);
    if (!frame) {
      swapchain_->present(pixel_size(), colour, pixels, w, h);
      return;
    }
    if (!swapchain_->present(pixel_size(), colour, pixels, w, h, {{channel_->read().handle(), frame->number}})) {
      // Nothing was submitted (a minimised window, or the swapchain was made again): the slot is free at once, the
      // pixels of the frame before stay, and a fresh frame is asked for.
      channel_->release(frame->number);
      emit frameWanted();
      return;
    }
    shown_geometry_ = geometry;
    ++frames_shown_;
    emit frameShown(frame->number);
  } catch (const std::exception& e) {
    fail(QString::fromStdString(e.what()));
  }
}

}  // namespace qvl::ui
