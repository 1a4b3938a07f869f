#pragma once
// The pool map drawn by Vulkan in a window of its own (embedded with QWidget::createWindowContainer): each new frame
// of the PoolMapChannel is coloured by the compute shader into a pixel buffer and copied into the swapchain. The
// GUI thread polls the channel (a look costs a lock and, for CUDA frames, one semaphore read) and never waits for
// the engine. The last pixels stay in host-visible memory, so an expose re-presents them and tests can read them.
#include <QTimer>
#include <QWindow>
#include <memory>
#include <vector>

#include "render/pool_map_channel.h"

namespace qvl::render {
class Swapchain;
}

namespace qvl::ui {

class VulkanViews;

class VulkanPoolWindow : public QWindow {
  Q_OBJECT
public:
  explicit VulkanPoolWindow(VulkanViews& views);
  ~VulkanPoolWindow() override;

  uint64_t frames_shown() const { return frames_shown_; }
  // The pixels of the last frame shown (R, G, B, A or B, G, R, A as order() says) and their size.
  std::vector<uint32_t> shown_pixels() const;
  PoolMapGeometry shown_geometry() const { return shown_geometry_; }
  render::ChannelOrder order() const;

signals:
  void frameShown(quint64 number);
  // The window's size changed: a frame drawn at the new size is wanted (the engine's thread draws them).
  void frameWanted();
  // Vulkan cannot draw here after all (no surface on this platform, a lost device): QPainter takes over.
  void failed(const QString& reason);

protected:
  void exposeEvent(QExposeEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

private:
  void poll();
  void present(const render::PoolMapChannel::Frame* frame);
  void fail(const QString& reason);
  VkExtent2D pixel_size() const;

  VulkanViews& views_;
  std::shared_ptr<render::PoolMapChannel> channel_;
  std::unique_ptr<render::PictureRenderer> renderer_;
  std::unique_ptr<render::Swapchain> swapchain_;
  std::unique_ptr<render::VulkanBuffer> pixels_;  // the last coloured frame
  PoolMapGeometry shown_geometry_{0, 0, 0};
  uint64_t frames_shown_ = 0;
  bool failed_ = false;
  QTimer poll_timer_;
};

}  // namespace qvl::ui
