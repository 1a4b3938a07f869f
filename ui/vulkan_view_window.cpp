#include "ui/vulkan_view_window.h"

#include <QExposeEvent>
#include <QPlatformSurfaceEvent>
#include <QGuiApplication>
#include <QVulkanInstance>

#include "render/swapchain.h"
#include "ui/vulkan_views.h"

namespace qvl::ui {

VulkanViewWindow::VulkanViewWindow(VulkanViews& views, uint64_t pixel_bytes) : views_(views) {
  setSurfaceType(QSurface::VulkanSurface);
  setVulkanInstance(views.instance());
  try {
    renderer_ = std::make_unique<render::PictureRenderer>(views.device());
    pixels_ = std::make_unique<render::VulkanBuffer>(views.device(), pixel_bytes, render::VulkanBuffer::Kind::HostVisible);
  } catch (const std::exception& e) {
    failed_ = true;
    QTimer::singleShot(0, this, [this, why = QString::fromStdString(e.what())] { emit failed(why); });
  }
  connect(&poll_timer_, &QTimer::timeout, this, [this] {
    if (ready()) poll();
  });
  poll_timer_.start(render::kViewLookMs);
}

VulkanViewWindow::~VulkanViewWindow() { retire(); }

void VulkanViewWindow::retire() {
  poll_timer_.stop();
  swapchain_.reset();  // waits for its submissions
}

bool VulkanViewWindow::event(QEvent* e) {
  if (e->type() == QEvent::PlatformSurface &&
      static_cast<QPlatformSurfaceEvent*>(e)->surfaceEventType() == QPlatformSurfaceEvent::SurfaceAboutToBeDestroyed)
    swapchain_.reset();  // Qt destroys the VkSurfaceKHR next (a dock floated or re-docked); the next expose makes both
  return QWindow::event(e);
}

render::ChannelOrder VulkanViewWindow::order() const {
  return swapchain_ ? swapchain_->order() : render::ChannelOrder::Bgra;
}

std::vector<uint32_t> VulkanViewWindow::shown_pixels() const {
  const auto* p = static_cast<const uint32_t*>(pixels_->mapped());
  return {p, p + size_t(shown_width_) * shown_height_};
}

render::BufferRange VulkanViewWindow::pixels() const { return {pixels_->buffer(), 0, pixels_->bytes()}; }

VkExtent2D VulkanViewWindow::pixel_size() const {
  const qreal ratio = devicePixelRatio();
  return {uint32_t(width() * ratio), uint32_t(height() * ratio)};
}

void VulkanViewWindow::fail(const QString& reason) {
  if (failed_) return;
  failed_ = true;
  poll_timer_.stop();
  emit failed(reason);
}

void VulkanViewWindow::exposeEvent(QExposeEvent*) {
  if (failed_ || !isExposed()) return;
  try {
    if (!swapchain_) {
      const VkSurfaceKHR surface = QVulkanInstance::surfaceForWindow(this);
      if (!surface)
        return fail("this display gives Vulkan no surface (Qt platform \"" + QGuiApplication::platformName() + "\")");
      swapchain_ = std::make_unique<render::Swapchain>(views_.device(), surface);
      emit frameWanted();
    }
    swapchain_->present(pixel_size(), [](VkCommandBuffer) {}, pixels(), shown_width_, shown_height_);
  } catch (const std::exception& e) {
    fail(QString::fromStdString(e.what()));
  }
}

void VulkanViewWindow::resizeEvent(QResizeEvent*) {
  if (failed_) return;
  const VkExtent2D size = pixel_size();
  if (size.width == 0 || size.height == 0) return;
  resized(size.width, size.height);
  emit frameWanted();
}

bool VulkanViewWindow::show(const std::function<void(VkCommandBuffer)>& colour, uint32_t width, uint32_t height,
                            const std::vector<render::CommandSlots::TimelinePoint>& waits,
                            render::CommandSlots::TimelinePoint done, uint64_t number) {
  try {
    if (!swapchain_->present(pixel_size(), colour, pixels(), width, height, waits, {done})) {
      emit frameWanted();  // nothing submitted (minimised, or the swapchain was made again)
      return false;
    }
  } catch (const std::exception& e) {
    fail(QString::fromStdString(e.what()));
    return false;
  }
  shown_width_ = width;
  shown_height_ = height;
  ++frames_shown_;
  emit frameShown(number);
  return true;
}

}  // namespace qvl::ui
