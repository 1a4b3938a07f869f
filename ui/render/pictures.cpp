#include "render/pictures.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace qvl::render {

namespace {

uint32_t channel(uint32_t pixel, int i) { return (pixel >> (8 * i)) & 0xff; }

uint32_t in_order(uint32_t rgba, ChannelOrder order) {
  if (order == ChannelOrder::Rgba) return rgba;
  return pack_rgba(channel(rgba, 2), channel(rgba, 1), channel(rgba, 0), channel(rgba, 3));
}

// A piecewise-linear ramp through dark blue, cyan, yellow and red (a readable "hot" map on photographs).
std::array<uint32_t, 256> make_heat_palette() {
  constexpr int kStops = 5;
  constexpr int at[kStops] = {0, 64, 128, 192, 255};
  constexpr uint32_t rgb[kStops][3] = {{16, 16, 96}, {0, 160, 224}, {64, 224, 96}, {255, 224, 0}, {240, 32, 16}};
  std::array<uint32_t, 256> palette{};
  for (int i = 0; i < 256; ++i) {
    int s = 0;
    while (s + 1 < kStops - 1 && i > at[s + 1]) ++s;
    const int span = at[s + 1] - at[s], t = i - at[s];
    uint32_t c[3];
    for (int k = 0; k < 3; ++k)
      c[k] = static_cast<uint32_t>((int(rgb[s][k]) * (span - t) + int(rgb[s + 1][k]) * t + span / 2) / span);
    palette[i] = pack_rgba(c[0], c[1], c[2]);
  }
  return palette;
}

}  // namespace

std::span<const uint32_t> pool_palette() {
  // Nothing, free, weights, kv cache, activations, workspace, other; then the capacity line. The same hues as the
  // QPainter view (ui/pool_map.cpp's owner_color).
  static constexpr std::array<uint32_t, kPoolCodeCount + 1> palette = {
      pack_rgba(24, 26, 32),   pack_rgba(70, 76, 88),   pack_rgba(66, 133, 244), pack_rgba(52, 168, 83),
      pack_rgba(251, 188, 5),  pack_rgba(234, 67, 53),  pack_rgba(154, 110, 200), pack_rgba(255, 255, 255)};
  return palette;
}

std::span<const uint32_t> heat_palette() {
  static const std::array<uint32_t, 256> palette = make_heat_palette();
  return palette;
}

std::vector<uint32_t> colour_pool_map(std::span<const uint8_t> codes, const PoolMapGeometry& g, int capacity_column,
                                      ChannelOrder order) {
  check_pool_map_geometry(g);
  if (codes.size() != size_t(g.width) * g.height) fail("pool map: ", codes.size(), " codes for ", g.width, "x", g.height);
  const auto palette = pool_palette();
  std::vector<uint32_t> pixels(codes.size());
  for (int y = 0; y < g.height; ++y)
    for (int x = 0; x < g.width; ++x) {
      const uint8_t code = codes[size_t(y) * g.width + x];
      uint32_t rgba = palette[std::min<uint32_t>(code & 0x7f, kPoolCodeCount - 1)];
      if (code & kPoolEdge) rgba = pack_rgba(channel(rgba, 0) * 5 / 8, channel(rgba, 1) * 5 / 8, channel(rgba, 2) * 5 / 8);
      if (x == capacity_column && y < g.bar_height) rgba = palette[kPoolCodeCount];
      pixels[size_t(y) * g.width + x] = in_order(rgba, order);
    }
  return pixels;
}

std::vector<uint32_t> colour_heatmap(std::span<const uint32_t> picture, std::span<const float> heat,
                                     const HeatmapShape& s, ChannelOrder order) {
  if (picture.size() != size_t(s.width) * s.height || heat.size() != size_t(s.grid_width) * s.grid_height ||
      s.grid_width == 0 || s.grid_height == 0 || s.opacity > 255)
    fail("heatmap: a ", s.width, "x", s.height, " picture and a ", s.grid_width, "x", s.grid_height,
         " grid do not match their data (or the opacity is over 255)");
  const auto palette = heat_palette();
  std::vector<uint32_t> pixels(picture.size());
  for (uint32_t y = 0; y < s.height; ++y)
    for (uint32_t x = 0; x < s.width; ++x) {
      const float level = heat[size_t(y * s.grid_height / s.height) * s.grid_width + x * s.grid_width / s.width];
      const uint32_t h = level >= 0.0f ? uint32_t(std::min(level, 255.0f)) : 0u;  // as the shader: NaN is cold
      const uint32_t alpha = h * s.opacity / 255, p = picture[size_t(y) * s.width + x], c = palette[h];
      uint32_t out[3];
      for (int k = 0; k < 3; ++k) out[k] = (channel(p, k) * (255 - alpha) + channel(c, k) * alpha + 127) / 255;
      pixels[size_t(y) * s.width + x] = in_order(pack_rgba(out[0], out[1], out[2]), order);
    }
  return pixels;
}

}  // namespace qvl::render
