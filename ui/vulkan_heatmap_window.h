#pragma once
// The attention over the picture drawn by Vulkan: each new HeatChannel frame (one decode step's heat over the latest
// image's merged patches) blended over the picture by heatmap.comp. The picture is decoded and scaled to the window
// off the GUI thread (set_picture) and uploaded once per picture or size.
#include <QFutureWatcher>
#include <QImage>

#include "render/heat_channel.h"
#include "ui/vulkan_view_window.h"

namespace qvl::ui {

class VulkanHeatmapWindow : public VulkanViewWindow {
  Q_OBJECT
public:
  explicit VulkanHeatmapWindow(VulkanViews& views);
  ~VulkanHeatmapWindow() override;
  // The picture the heat is drawn over (the latest image of the request); empty: none.
  void set_picture(const QString& path);
  // The picture as uploaded (window-sized, R, G, B, A bytes): what the shader blends over.
  std::vector<uint32_t> picture_pixels() const { return picture_; }
  uint32_t picture_width() const { return picture_width_; }
  uint32_t picture_height() const { return picture_height_; }
  render::HeatFrameMeta shown_meta() const { return shown_meta_; }
  // The heat of the frame shown, where the host can see it (a channel not shared with CUDA); else empty.
  std::vector<float> shown_heat() const { return shown_heat_; }

protected:
  void poll() override;
  void resized(uint32_t width, uint32_t height) override;

private:
  void scale_picture();

  std::shared_ptr<render::HeatChannel> channel_;
  std::unique_ptr<render::VulkanBuffer> picture_buffer_;
  QString path_;
  QFutureWatcher<QImage> scaling_;
  std::vector<uint32_t> picture_;
  uint32_t picture_width_ = 0, picture_height_ = 0;
  render::HeatFrameMeta shown_meta_;
  std::vector<float> shown_heat_;
};

}  // namespace qvl::ui
