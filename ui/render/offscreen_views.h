#pragma once
// Both views drawn offscreen as qvl-studio's windows draw them: the same channels and feed (views_feed.h), the same
// renderer and semaphore waits, into read-back memory instead of a swapchain, by a viewer thread that looks at the
// channels every 16 ms as the windows' timers do. `qvl bench --views` runs it beside decode to measure what the views
// cost the answer, how long a frame takes to draw, and to save what was drawn.
#include <array>
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "render/views_feed.h"
#include "vision/image.h"

namespace qvl::render {

struct OffscreenViewStats {
  uint64_t published = 0, dropped = 0, skipped = 0;  // by the engine's thread (skipped: the heat's throttle)
  uint64_t drawn = 0, drawn_from_cuda_memory = 0;    // by the viewer
  std::vector<double> draw_ms;                       // each drawn frame: taken -> its `read` signal reached
};

class OffscreenViews {
public:
  // Makes its own device, matched to CUDA device `cuda_uuid` where given ($QVL_VULKAN_VALIDATION=1: validation
  // layers on); no_cuda_reason: said when cuda_uuid is empty (the model runs on the CPU). Throws qvl::Error saying
  // why when Vulkan cannot draw here. Destroy it before the engine's backend goes (the model moves or is unloaded):
  // it releases what it imported there.
  OffscreenViews(std::optional<std::array<uint8_t, 16>> cuda_uuid, std::string no_cuda_reason,
                 const PoolMapGeometry& pool_geometry);
  ~OffscreenViews();

  // The picture the heat is drawn over, RGBA (pack_rgba), at most kMaxPictureSide pixels a side; before start().
  void set_picture(std::vector<uint32_t> rgba, uint32_t width, uint32_t height);
  ViewsFeed& feed() { return *feed_; }
  // Empty when frames come straight from CUDA memory, else why they are uploaded from the host.
  std::string interop_reason() const;
  std::string device_name() const;
  // The validation layers' warnings and errors so far (nullopt: the layers are off).
  std::optional<std::vector<std::string>> validation_messages() const;

  // The viewer thread; stop() returns after the last frame it took is drawn (and rethrows what failed there).
  void start();
  void stop();

  // The rest is read while the viewer is stopped (qvl::Error otherwise). Counts since the last reset_stats() (a
  // warm-up's frames left out); the snapshots are the last frame drawn of each view, RGBA (empty if none).
  void reset_stats();
  OffscreenViewStats pool_stats() const;
  OffscreenViewStats heat_stats() const;
  struct Snapshot {
    uint32_t width = 0, height = 0;
    std::vector<uint32_t> rgba;
  };
  Snapshot pool_snapshot() const;
  Snapshot heat_snapshot() const;

private:
  void view_loop();
  template <typename Channel> void draw(Channel& channel, uint32_t slot);
  void require_stopped(const char* what) const;

  std::unique_ptr<VulkanDevice> device_;
  std::unique_ptr<PictureRenderer> renderer_;
  std::unique_ptr<CommandSlots> commands_;  // slot 0 the pool map, slot 1 the heatmap
  std::shared_ptr<PoolMapChannel> pool_;
  std::shared_ptr<HeatChannel> heat_;
  std::unique_ptr<ViewsFeed> feed_;
  std::unique_ptr<VulkanBuffer> pool_pixels_, heat_pixels_, picture_;
  uint32_t picture_width_ = 0, picture_height_ = 0;
  bool validation_ = false;

  std::thread viewer_;
  std::atomic<bool> stopping_{false};
  std::string failure_;  // set by the viewer thread, read after join
  // The viewer's counts and what it drew last (touched by it while it runs, read after join), and the channels'
  // counts at the last reset_stats().
  OffscreenViewStats pool_drawn_, heat_drawn_, pool_before_, heat_before_;
  PoolMapGeometry pool_shown_{0, 0, 0};
  HeatmapShape heat_shown_;
};

// An RGB picture fitted into max_side x max_side (nearest pixel), as RGBA for OffscreenViews::set_picture.
struct FittedPicture {
  std::vector<uint32_t> rgba;
  uint32_t width = 0, height = 0;
};
FittedPicture fit_picture(const RgbImage& image, uint32_t max_side);

// RGBA pixels as a binary PPM (P6; alpha dropped), written atomically.
void write_ppm(const std::filesystem::path& path, const std::vector<uint32_t>& rgba, uint32_t width, uint32_t height);

}  // namespace qvl::render
