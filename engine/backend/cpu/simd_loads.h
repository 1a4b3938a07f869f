#pragma once
// Loads of f32, bf16 and f16 elements widened to f32, one per vector width, for kernels templated on the element type
// (the dot kernels' weight rows; attention's keys and values, f32 or bf16 in the KV cache). A function's target
// attribute is its own, so each instruction set has its own load; the callers' loops are written per set.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/simd_math.h"
#include "core/dtype.h"
#include "core/half.h"

namespace qvl::cpu {

template <DType T>
constexpr std::size_t kElementBytes = T == DType::F32 ? 4 : 2;

// The element `i` elements after `p`.
template <DType T>
inline const void* element_at(const void* p, std::size_t i) {
  return static_cast<const char*>(p) + i * kElementBytes<T>;
}

template <DType T>
inline float load1(const void* w, std::size_t i) {
  if constexpr (T == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  else if constexpr (T == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  else return static_cast<const float*>(w)[i];
}

template <DType T>
QVL_AVX2_F16C inline __m256 load8(const void* w, std::size_t i) {
  if constexpr (T == DType::BF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16 is the top half of f32
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  }
}

template <DType T>
QVL_AVX512_F16C inline __m512 load16(const void* w, std::size_t i) {
  if constexpr (T == DType::BF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i)));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  }
}

// The first `count` (< 16) elements from i, the rest zero, reading nothing past them: f32 under a mask; 16-bit
// elements through a small copy (their masked load needs AVX-512BW, which these kernels do not ask for).
template <DType T>
QVL_AVX512_F16C inline __m512 load16_first(const void* w, std::size_t i, std::size_t count) {
  if constexpr (T == DType::F32) {
    return _mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), static_cast<const float*>(w) + i);
  } else {
    alignas(32) uint16_t part[16] = {};
    std::memcpy(part, static_cast<const uint16_t*>(w) + i, count * sizeof(uint16_t));
    return load16<T>(part, 0);
  }
}

}  // namespace qvl::cpu
