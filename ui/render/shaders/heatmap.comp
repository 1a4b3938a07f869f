#version 450
// The current token's attention over the picture's patches, blended over the picture; render/pictures.cpp's
// colour_heatmap is the reference, byte for byte.
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, set = 0, binding = 0) readonly buffer Picture { uint picture[]; };  // R, G, B, A bytes
layout(std430, set = 0, binding = 1) readonly buffer Heat { float heat[]; };       // whole numbers 0..255
layout(std430, set = 0, binding = 2) readonly buffer Palette { uint palette[]; };  // 256 colours
layout(std430, set = 0, binding = 3) writeonly buffer Pixels { uint pixels[]; };
layout(push_constant) uniform Push {
  uint width;
  uint height;
  uint grid_width;
  uint grid_height;
  uint opacity;  // 0..255
  uint bgra;
} pc;

uint channel(uint p, uint i) { return (p >> (8u * i)) & 0xffu; }

void main() {
  const uint x = gl_GlobalInvocationID.x, y = gl_GlobalInvocationID.y;
  if (x >= pc.width || y >= pc.height) return;
  const uint cell = (y * pc.grid_height / pc.height) * pc.grid_width + x * pc.grid_width / pc.width;
  const float level = heat[cell];
  const uint h = level >= 0.0 ? uint(min(level, 255.0)) : 0u;  // NaN and negatives are cold (NaN fails >=)
  const uint alpha = h * pc.opacity / 255u;
  const uint p = picture[y * pc.width + x], c = palette[h];
  uint o[3];
  for (uint k = 0u; k < 3u; ++k) o[k] = (channel(p, k) * (255u - alpha) + channel(c, k) * alpha + 127u) / 255u;
  pixels[y * pc.width + x] = pc.bgra == 1u ? (o[2] | o[1] << 8 | o[0] << 16 | 255u << 24)
                                           : (o[0] | o[1] << 8 | o[2] << 16 | 255u << 24);
}
