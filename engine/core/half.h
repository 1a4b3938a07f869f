#pragma once
// bf16 and f16 <-> f32 conversions that round exactly like PyTorch (round to nearest, ties to even; NaN stays NaN).
#include <bit>
#include <cstdint>

namespace qvl {

inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN: PyTorch returns the canonical quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                      // ties to even
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: value = mantissa * 2^-24, exact in f32.
    float v = float(mantissa) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u); // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                                 // below the smallest normal f16 (2^-14): subnormal or 0
    // Adding 0.5 (2^-1) aligns the f16 subnormal grid (2^-24) to the f32 mantissa LSB; the FPU rounds to even.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    return uint16_t(sign | uint16_t(std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);    // ties to even on the 13 dropped bits
  return uint16_t(sign | uint16_t((rounded - 0x38000000u) >> 13));
}

}  // namespace qvl
