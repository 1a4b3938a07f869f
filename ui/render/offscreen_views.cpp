#include "render/offscreen_views.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "io/atomic_file.h"

namespace qvl::render {

namespace {

constexpr auto kLook = std::chrono::milliseconds(16);  // the windows' poll (vulkan_view_window.cpp)
constexpr int kMaxPictureSide = 2048;                   // as the heatmap window
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
  try {
    stop();
  } catch (...) {  // already said by stop() where the caller asked
  }
  commands_->wait_all();
  feed_->forget_imports();
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
  viewer_ = std::thread([this] { view_loop(); });
}

void OffscreenViews::stop() {
  if (!viewer_.joinable()) return;
  stopping_ = true;
  viewer_.join();
  if (!failure_.empty()) fail("the offscreen views: ", failure_);
}

void OffscreenViews::view_loop() {
  try {
    for (auto next = std::chrono::steady_clock::now(); !stopping_; next += kLook) {
      draw_pool();
      draw_heat();
      std::this_thread::sleep_until(next);
    }
  } catch (const std::exception& e) {
    failure_ = e.what();
  }
}

// Both draws mirror the windows' poll(): the newest frame taken, coloured by the renderer after waiting for the
// `written` point CUDA signals (already reached when taken), `read` signalled after; here the host then waits for
// `read`, which is the frame's draw time.
bool OffscreenViews::draw_pool() {
  pool_->release_finished();
  const auto frame = pool_->take_newest();
  if (!frame) return false;
  const auto start = std::chrono::steady_clock::now();
  const PoolMapGeometry g = frame->meta.geometry;
  VkCommandBuffer cmd = commands_->begin(0);
  renderer_->record_pool_map(cmd, frame->data, {pool_pixels_->buffer(), 0, uint64_t(g.width) * g.height * 4}, g,
                             frame->meta.capacity_column, ChannelOrder::Rgba);
  commands_->end(0);
  if (frame->filled_on_gpu)
    commands_->submit(0, {{pool_->written().handle(), frame->number}}, {{pool_->read().handle(), frame->number}});
  else
    commands_->submit(0, {}, {{pool_->read().handle(), frame->number}});
  if (!pool_->read().wait(frame->number, kDrawTimeoutNs)) fail("pool map frame ", frame->number, " was not drawn in 5 s");
  pool_->release(frame->number);
  pool_drawn_.draw_ms.push_back(ms_since(start));
  ++pool_drawn_.drawn;
  pool_drawn_.drawn_from_cuda_memory += frame->filled_on_gpu;
  pool_shown_ = g;
  return true;
}

bool OffscreenViews::draw_heat() {
  heat_->release_finished();
  if (!picture_width_) return false;  // nothing to draw over (the window waits for its picture too)
  const auto frame = heat_->take_newest();
  if (!frame) return false;
  const auto start = std::chrono::steady_clock::now();
  const HeatmapShape shape{picture_width_, picture_height_, frame->meta.grid_w, frame->meta.grid_h, kHeatOpacity};
  const uint64_t bytes = uint64_t(picture_width_) * picture_height_ * 4;
  VkCommandBuffer cmd = commands_->begin(1);
  renderer_->record_heatmap(cmd, {picture_->buffer(), 0, bytes}, frame->data, {heat_pixels_->buffer(), 0, bytes}, shape,
                            ChannelOrder::Rgba);
  commands_->end(1);
  if (frame->filled_on_gpu)
    commands_->submit(1, {{heat_->written().handle(), frame->number}}, {{heat_->read().handle(), frame->number}});
  else
    commands_->submit(1, {}, {{heat_->read().handle(), frame->number}});
  if (!heat_->read().wait(frame->number, kDrawTimeoutNs)) fail("heatmap frame ", frame->number, " was not drawn in 5 s");
  heat_->release(frame->number);
  heat_drawn_.draw_ms.push_back(ms_since(start));
  ++heat_drawn_.drawn;
  heat_drawn_.drawn_from_cuda_memory += frame->filled_on_gpu;
  heat_shown_ = shape;
  return true;
}

OffscreenViewStats OffscreenViews::pool_stats() const {
  OffscreenViewStats s = pool_drawn_;
  s.published = pool_->frames_published();
  s.dropped = pool_->frames_dropped();
  return s;
}

OffscreenViewStats OffscreenViews::heat_stats() const {
  OffscreenViewStats s = heat_drawn_;
  s.published = heat_->frames_published();
  s.dropped = heat_->frames_dropped();
  s.skipped = heat_->frames_skipped();
  return s;
}

OffscreenViews::Snapshot OffscreenViews::pool_snapshot() const {
  if (!pool_drawn_.drawn) return {};
  const auto* p = static_cast<const uint32_t*>(pool_pixels_->mapped());
  const size_t n = size_t(pool_shown_.width) * pool_shown_.height;
  return {uint32_t(pool_shown_.width), uint32_t(pool_shown_.height), {p, p + n}};
}

OffscreenViews::Snapshot OffscreenViews::heat_snapshot() const {
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
