#include "render/offscreen_views.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "io/atomic_file.h"

namespace qvl::render {

namespace {

constexpr auto kLook = std::chrono::milliseconds(kViewLookMs);  // as the windows' poll
constexpr uint64_t kDrawTimeoutNs = 5'000'000'000ull;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

OffscreenViews::OffscreenViews(std::optional<std::array<uint8_t, 16>> cuda_uuid, std::string no_cuda_reason,
                               const PoolMapGeometry& pool_geometry) {
  DeviceRequest request;
  request.cuda_uuid = cuda_uuid;
  request.no_cuda_reason = std::move(no_cuda_reason);
  const char* validation = std::getenv("QVL_VULKAN_VALIDATION");
  request.validation = validation_ = validation && std::string(validation) == "1";
  device_ = std::make_unique<VulkanDevice>(request);
  renderer_ = std::make_unique<PictureRenderer>(*device_);
  commands_ = std::make_unique<CommandSlots>(*device_, 2);  // slot 0 the pool map, slot 1 the heatmap
  const bool shared = device_->shares_memory_with_cuda();
  pool_ = std::make_shared<PoolMapChannel>(*device_, shared);
  heat_ = std::make_shared<HeatChannel>(*device_, shared);
  pool_->set_geometry(pool_geometry);
  feed_ = std::make_unique<ViewsFeed>(pool_, heat_, shared ? cuda_uuid : std::nullopt);
  pool_pixels_ = std::make_unique<VulkanBuffer>(
      *device_, uint64_t(PoolMapChannel::kMaxWidth) * PoolMapChannel::kMaxHeight * 4, VulkanBuffer::Kind::HostVisible);
  const uint64_t picture_bytes = uint64_t(kMaxPictureSide) * kMaxPictureSide * 4;
  heat_pixels_ = std::make_unique<VulkanBuffer>(*device_, picture_bytes, VulkanBuffer::Kind::HostVisible);
  picture_ = std::make_unique<VulkanBuffer>(*device_, picture_bytes, VulkanBuffer::Kind::HostVisible);
}

OffscreenViews::~OffscreenViews() {
  // Never throws (it also runs while an exception unwinds): a lost device here has nothing left to say.
  try {
    stop();
  } catch (...) {
  }
  try {
    commands_->wait_all();
    feed_->forget_imports();
  } catch (...) {
  }
}

void OffscreenViews::set_picture(std::vector<uint32_t> rgba, uint32_t width, uint32_t height) {
  if (viewer_.joinable()) fail("OffscreenViews: the picture is set before the viewer starts");
  if (width == 0 || height == 0 || width > kMaxPictureSide || height > kMaxPictureSide || rgba.size() != size_t(width) * height)
    fail("OffscreenViews: a picture of ", width, " x ", height, " (", rgba.size(), " pixels) is not 1 to ",
         kMaxPictureSide, " pixels a side");
  std::memcpy(picture_->mapped(), rgba.data(), rgba.size() * 4);
  picture_width_ = width;
  picture_height_ = height;
}

std::string OffscreenViews::interop_reason() const { return device_->interop_reason(); }
std::string OffscreenViews::device_name() const { return device_->name; }

std::optional<std::vector<std::string>> OffscreenViews::validation_messages() const {
  if (!validation_) return std::nullopt;
  return device_->validation_messages();
}

void OffscreenViews::start() {
  if (viewer_.joinable()) return;
  stopping_ = false;
  failure_.clear();
  viewer_ = std::thread([this] { view_loop(); });
}

void OffscreenViews::stop() {
  if (!viewer_.joinable()) return;
  stopping_ = true;
  viewer_.join();
  if (!failure_.empty()) fail("the offscreen views: ", failure_);
}

void OffscreenViews::require_stopped(const char* what) const {
  if (viewer_.joinable()) fail("OffscreenViews::", what, " is read after stop()");
}

void OffscreenViews::reset_stats() {
  require_stopped("reset_stats");
  pool_drawn_ = {};
  heat_drawn_ = {};
  pool_before_ = {pool_->frames_published(), pool_->frames_dropped(), 0};
  heat_before_ = {heat_->frames_published(), heat_->frames_dropped(), heat_->frames_skipped()};
}

void OffscreenViews::view_loop() {
  try {
    for (auto next = std::chrono::steady_clock::now(); !stopping_;) {
      draw(*pool_, 0);
      draw(*heat_, 1);
      // Paced like a timer: a slow draw is not followed by a burst of looks to catch up.
      next = std::max(next + kLook, std::chrono::steady_clock::now());
      std::this_thread::sleep_until(next);
    }
  } catch (const std::exception& e) {
    failure_ = e.what();
  }
}

// As the windows' poll(): the newest frame taken, coloured by the renderer after waiting for the `written` point
// CUDA signals (already reached when taken), `read` signalled after; here the host then waits for `read` (the
// frame's draw time) and releases the frame at once, so no frame is still being read at the next look.
template <typename Channel> void OffscreenViews::draw(Channel& channel, uint32_t slot) {
  if constexpr (std::is_same_v<Channel, HeatChannel>)
    if (!picture_width_) return;  // nothing to draw over (the window waits for its picture too)
  const auto frame = channel.take_newest();
  if (!frame) return;
  const auto start = std::chrono::steady_clock::now();
  // What this frame is drawn as, kept for the snapshot once it is drawn (a failed draw leaves the last one's).
  constexpr bool kHeat = std::is_same_v<Channel, HeatChannel>;
  const auto shape = [&] {
    if constexpr (kHeat) return HeatmapShape{picture_width_, picture_height_, frame->meta.grid_w, frame->meta.grid_h, kHeatOpacity};
    else return frame->meta.geometry;
  }();
  try {
    VkCommandBuffer cmd = commands_->begin(slot);
    if constexpr (kHeat) {
      const uint64_t bytes = uint64_t(shape.width) * shape.height * 4;
      renderer_->record_heatmap(cmd, {picture_->buffer(), 0, bytes}, frame->data, {heat_pixels_->buffer(), 0, bytes},
                                shape, ChannelOrder::Rgba);
    } else {
      renderer_->record_pool_map(cmd, frame->data, {pool_pixels_->buffer(), 0, uint64_t(shape.width) * shape.height * 4},
                                 shape, frame->meta.capacity_column, ChannelOrder::Rgba);
    }
    commands_->end(slot);
    commands_->submit(slot, channel.waits_for(*frame), {channel.read_point(*frame)});
    if (!channel.read().wait(frame->number, kDrawTimeoutNs)) fail("frame ", frame->number, " was not drawn in 5 s");
  } catch (...) {
    device_->api.vkQueueWaitIdle(device_->queue);  // nothing may still read the slot once it is free again
    channel.release(frame->number);
    throw;
  }
  channel.release(frame->number);
  if constexpr (kHeat) heat_shown_ = shape;
  else pool_shown_ = shape;
  OffscreenViewStats& stats = kHeat ? heat_drawn_ : pool_drawn_;
  stats.draw_ms.push_back(ms_since(start));
  ++stats.drawn;
  stats.drawn_from_cuda_memory += frame->filled_on_gpu;
}

OffscreenViewStats OffscreenViews::pool_stats() const {
  require_stopped("pool_stats");
  OffscreenViewStats s = pool_drawn_;
  s.published = pool_->frames_published() - pool_before_.published;
  s.dropped = pool_->frames_dropped() - pool_before_.dropped;
  return s;
}

OffscreenViewStats OffscreenViews::heat_stats() const {
  require_stopped("heat_stats");
  OffscreenViewStats s = heat_drawn_;
  s.published = heat_->frames_published() - heat_before_.published;
  s.dropped = heat_->frames_dropped() - heat_before_.dropped;
  s.skipped = heat_->frames_skipped() - heat_before_.skipped;
  return s;
}

OffscreenViews::Snapshot OffscreenViews::pool_snapshot() const {
  require_stopped("pool_snapshot");
  if (!pool_drawn_.drawn) return {};
  const auto* p = static_cast<const uint32_t*>(pool_pixels_->mapped());
  const size_t n = size_t(pool_shown_.width) * pool_shown_.height;
  return {uint32_t(pool_shown_.width), uint32_t(pool_shown_.height), {p, p + n}};
}

OffscreenViews::Snapshot OffscreenViews::heat_snapshot() const {
  require_stopped("heat_snapshot");
  if (!heat_drawn_.drawn) return {};
  const auto* p = static_cast<const uint32_t*>(heat_pixels_->mapped());
  return {heat_shown_.width, heat_shown_.height, {p, p + size_t(heat_shown_.width) * heat_shown_.height}};
}

FittedPicture fit_picture(const RgbImage& image, uint32_t max_side) {
  if (image.width <= 0 || image.height <= 0) fail("fit_picture: an empty image");
  const double scale = std::min(1.0, double(max_side) / double(std::max(image.width, image.height)));
  FittedPicture out;
  out.width = std::max<uint32_t>(1, uint32_t(double(image.width) * scale));
  out.height = std::max<uint32_t>(1, uint32_t(double(image.height) * scale));
  out.rgba.resize(size_t(out.width) * out.height);
  for (uint32_t y = 0; y < out.height; ++y)
    for (uint32_t x = 0; x < out.width; ++x) {
      const int64_t sy = std::min<int64_t>(image.height - 1, int64_t(y) * image.height / out.height);
      const int64_t sx = std::min<int64_t>(image.width - 1, int64_t(x) * image.width / out.width);
      out.rgba[size_t(y) * out.width + x] = pack_rgba(image.at(sy, sx, 0), image.at(sy, sx, 1), image.at(sy, sx, 2));
    }
  return out;
}

void write_ppm(const std::filesystem::path& path, const std::vector<uint32_t>& rgba, uint32_t width, uint32_t height) {
  if (rgba.size() != size_t(width) * height) fail("write_ppm: ", rgba.size(), " pixels for ", width, " x ", height);
  std::string text = "P6\n" + std::to_string(width) + " " + std::to_string(height) + "\n255\n";
  text.reserve(text.size() + rgba.size() * 3);
  for (uint32_t p : rgba) {
    text.push_back(char(p & 0xff));
    text.push_back(char((p >> 8) & 0xff));
    text.push_back(char((p >> 16) & 0xff));
  }
  write_file_atomically(path, text);
}

}  // namespace qvl::render
