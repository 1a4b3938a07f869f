#pragma once
// The views' colouring on the CPU: the reference the Vulkan shaders (shaders/*.comp) are tested against, pixel
// for pixel. Integer arithmetic only, so both give the same bytes. Pixels are 32-bit words whose bytes in memory
// are R, G, B, A (VK_FORMAT_R8G8B8A8_UNORM), or B, G, R, A for swapchains that want that order.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/pool_picture.h"

namespace qvl::render {

enum class ChannelOrder : uint32_t { Rgba = 0, Bgra = 1 };

constexpr uint32_t pack_rgba(uint32_t r, uint32_t g, uint32_t b, uint32_t a = 255) {
  return r | g << 8 | b << 16 | a << 24;
}

// kPoolCodeCount colours, then the capacity line's (index kPoolCodeCount).
std::span<const uint32_t> pool_palette();
// 256 colours from cold to hot.
std::span<const uint32_t> heat_palette();

// Pool map codes (draw_pool_map) to pixels: the code's colour, edges darkened to 5/8, the capacity line over the bar.
std::vector<uint32_t> colour_pool_map(std::span<const uint8_t> codes, const PoolMapGeometry& geometry,
                                      int capacity_column, ChannelOrder order);

// The heatmap: a grid of heat levels (whole numbers 0 cold .. 255 hot, row by row, as AttentionFrame gives them)
// stretched over the picture (nearest cell), each pixel blended towards heat_palette()[heat] by heat * opacity / 255.
struct HeatmapShape {
  uint32_t width = 0, height = 0;      // the picture's pixels
  uint32_t grid_width = 0, grid_height = 0;
  uint32_t opacity = 176;              // 0..255 (kHeatOpacity)
};
// What the views share, the windows and the offscreen views alike: how strongly the heat lies over the picture, the
// most pixels a side the picture is drawn at, the pool map's occupancy bar (rows), and how often a view looks for a
// new frame (the engine publishes the pool at most every 33 ms with the live numbers, the heat every 15 ms).
constexpr uint32_t kHeatOpacity = 176;
constexpr int kMaxPictureSide = 2048;
constexpr int kPoolBarHeight = 14;
constexpr int kViewLookMs = 16;
std::vector<uint32_t> colour_heatmap(std::span<const uint32_t> picture_rgba, std::span<const float> heat,
                                     const HeatmapShape& shape, ChannelOrder order);

}  // namespace qvl::render
