#pragma once
// A QWindow drawn by Vulkan (embedded with QWidget::createWindowContainer): the surface Qt makes for our instance,
// a Swapchain, a poll of the view's frame channel every 16 ms on the GUI thread (a look costs a lock and, for
// frames the GPU filled, one semaphore read: the GUI never waits for the engine), and the last coloured pixels kept
// in host-visible memory, so an expose re-presents them and tests can read them. Subclasses say what a frame is.
#include <QTimer>
#include <QWindow>
#include <functional>
#include <memory>
#include <vector>

#include "render/picture_renderer.h"

namespace qvl::render {
class Swapchain;
}

namespace qvl::ui {

class VulkanViews;

class VulkanViewWindow : public QWindow {
  Q_OBJECT
public:
  // pixel_bytes: the most the coloured pixels of one frame take.
  VulkanViewWindow(VulkanViews& views, uint64_t pixel_bytes);
  ~VulkanViewWindow() override;

  uint64_t frames_shown() const { return frames_shown_; }
  // The last frame's pixels (R, G, B, A or B, G, R, A as order() says), shown_width() x shown_height().
  std::vector<uint32_t> shown_pixels() const;
  uint32_t shown_width() const { return shown_width_; }
  uint32_t shown_height() const { return shown_height_; }
  render::ChannelOrder order() const;

signals:
  void frameShown(quint64 number);
  void frameWanted();  // the size changed (or the window was just made): a frame of the new size is wanted
  void failed(const QString& reason);  // Vulkan cannot draw here after all: the caller falls back to QPainter

protected:
  void exposeEvent(QExposeEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  bool event(QEvent* event) override;  // the native surface going away takes the swapchain with it
  // Called from the poll: take the channel's newest frame, if any, and show() it.
  virtual void poll() = 0;
  virtual void resized(uint32_t width, uint32_t height) = 0;
  // Colours a frame into pixels() with `colour` (width x height pixels) once `waits` are reached, presents it and
  // signals `done` (the channel's read point). False when nothing was submitted (the caller releases the frame).
  bool show(const std::function<void(VkCommandBuffer)>& colour, uint32_t width, uint32_t height,
            const std::vector<render::CommandSlots::TimelinePoint>& waits,
            render::CommandSlots::TimelinePoint done, uint64_t number);
  render::BufferRange pixels() const;
  VkExtent2D pixel_size() const;
  void fail(const QString& reason);
  bool ready() const { return !failed_ && swapchain_ && isExposed(); }
  // Stops the poll and waits for every submission (the swapchain's): a subclass's destructor calls it first, before
  // the buffers its submissions read go.
  void retire();

  VulkanViews& views_;
  std::unique_ptr<render::PictureRenderer> renderer_;

private:
  std::unique_ptr<render::Swapchain> swapchain_;
  std::unique_ptr<render::VulkanBuffer> pixels_;
  uint32_t shown_width_ = 0, shown_height_ = 0;
  uint64_t frames_shown_ = 0;
  bool failed_ = false;
  QTimer poll_timer_;
};

}  // namespace qvl::ui
