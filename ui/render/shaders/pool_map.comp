#version 450
// Colours the pool map's codes (engine/backend/pool_picture.h) into pixels; render/pictures.cpp's colour_pool_map
// is the reference, byte for byte.
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, set = 0, binding = 0) readonly buffer Codes { uint codes[]; };     // 4 codes a word
layout(std430, set = 0, binding = 1) readonly buffer Palette { uint palette[]; }; // 7 codes + the capacity line
layout(std430, set = 0, binding = 2) writeonly buffer Pixels { uint pixels[]; };
layout(push_constant) uniform Push {
  uint width;
  uint height;
  uint bar_height;
  int capacity_column;  // -1: none
  uint bgra;            // 1: B, G, R, A in memory
} pc;

uint channel(uint p, uint i) { return (p >> (8u * i)) & 0xffu; }

void main() {
  const uint x = gl_GlobalInvocationID.x, y = gl_GlobalInvocationID.y;
  if (x >= pc.width || y >= pc.height) return;
  const uint i = y * pc.width + x;
  const uint code = (codes[i >> 2] >> (8u * (i & 3u))) & 0xffu;
  uint rgba = palette[min(code & 0x7fu, 6u)];
  if ((code & 0x80u) != 0u)
    rgba = (channel(rgba, 0u) * 5u / 8u) | (channel(rgba, 1u) * 5u / 8u) << 8 | (channel(rgba, 2u) * 5u / 8u) << 16 |
           255u << 24;
  if (int(x) == pc.capacity_column && y < pc.bar_height) rgba = palette[7];
  if (pc.bgra == 1u) rgba = channel(rgba, 2u) | channel(rgba, 1u) << 8 | channel(rgba, 0u) << 16 | channel(rgba, 3u) << 24;
  pixels[i] = rgba;
}
