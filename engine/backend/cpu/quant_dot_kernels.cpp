#include "backend/cpu/quant_dot_kernels.h"

#include <algorithm>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/simd_math.h"
#include "backend/weight_format.h"
#include "core/half.h"

namespace qvl::cpu {
namespace {

constexpr std::size_t kBlock = std::size_t(kQuantBlock);
constexpr std::size_t kRowsPerPass = 4;  // activation rows sharing one unpacked weight block

// Block b's weight scale: a shift, not a division (a 64-bit division per block cost half the loop's time), and the
// f16 widened by F16C where the variant has it.
inline float scale_of(const QuantDot& a, std::size_t b) { return f16_to_f32(a.w_scales[b >> a.group_shift]); }

// ---- generic ---------------------------------------------------------------------------------------------------
// The 32 signed values of weight block b.
void unpack_q8(const uint8_t* w, std::size_t b, int8_t* out) {
  std::copy_n(reinterpret_cast<const int8_t*>(w) + b * kBlock, kBlock, out);
}
void unpack_q4(const uint8_t* w, std::size_t b, int8_t* out) {
  for (std::size_t j = 0; j < kBlock / 2; ++j) {
    const uint8_t byte = w[b * kBlock / 2 + j];
    out[j] = int8_t((byte & 15) - 8);
    out[j + kBlock / 2] = int8_t((byte >> 4) - 8);
  }
}

template <void (*Unpack)(const uint8_t*, std::size_t, int8_t*)>
void dot_generic(const QuantDot& a) {
  for (std::size_t m0 = 0; m0 < a.rows; m0 += kRowsPerPass) {
    const std::size_t rows = std::min(kRowsPerPass, a.rows - m0);
    float sum[kRowsPerPass] = {};
    for (std::size_t b = 0; b < a.blocks; ++b) {
      int8_t w[kBlock];
      Unpack(a.w, b, w);
      const float dw = scale_of(a, b);
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t block = (m0 + r) * a.blocks + b;
        const int8_t* x = a.x + block * kBlock;
        int32_t acc = 0;
        for (std::size_t i = 0; i < kBlock; ++i) acc += int32_t(w[i]) * int32_t(x[i]);
        sum[r] += dw * a.x_scales[block] * float(acc);
      }
    }
    for (std::size_t r = 0; r < rows; ++r) a.y[(m0 + r) * a.y_stride] = sum[r];
  }
}

// ---- AVX2 (+ F16C for the scales) -----------------------------------------------------------------------------------
#define QVL_AVX2_F16C __attribute__((target("avx2,fma,f16c")))
QVL_AVX2_F16C inline float scale_f16c(const QuantDot& a, std::size_t b) { return _cvtsh_ss(a.w_scales[b >> a.group_shift]); }

QVL_AVX2 inline __m256i load_q8(const uint8_t* w, std::size_t b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + b * kBlock));
}
// Low nibbles are values 0..15 of the block, high nibbles 16..31: one shift puts them in the two 128-bit lanes.
QVL_AVX2 inline __m256i load_q4(const uint8_t* w, std::size_t b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + b * kBlock / 2));
  const __m256i nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
  return _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
}

// The block's 32 products as 8 int32 partial sums, converted to f32. maddubs multiplies unsigned by signed bytes,
// so the weight's sign moves onto the activation (|w| · sign(w)·x); the pair sums stay below 2·128·127 < 2^15.
QVL_AVX2 inline __m256 block_products(__m256i w_abs, __m256i w, const int8_t* x) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(xv, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

template <__m256i (*Load)(const uint8_t*, std::size_t), std::size_t BlockBytes>
QVL_AVX2_F16C void dot_avx2(const QuantDot& a) {
  std::size_t m0 = 0;
  for (; m0 + kRowsPerPass <= a.rows; m0 += kRowsPerPass) {  // prefill: each unpacked block serves four rows
    __m256 acc[kRowsPerPass] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (std::size_t b = 0; b < a.blocks; ++b) {
      const __m256i w = Load(a.w, b), w_abs = _mm256_sign_epi8(w, w);
      const float dw = scale_f16c(a, b);
      for (std::size_t r = 0; r < kRowsPerPass; ++r) {
        const std::size_t block = (m0 + r) * a.blocks + b;
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.x_scales[block]), block_products(w_abs, w, a.x + block * kBlock),
                                 acc[r]);
      }
    }
    for (std::size_t r = 0; r < kRowsPerPass; ++r) a.y[(m0 + r) * a.y_stride] = hsum_avx2(acc[r]);
  }
  for (; m0 < a.rows; ++m0) {  // decode: one row, the weight stream prefetched 1 KB ahead (as the float kernels do)
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;  // two blocks a step: independent chains hide the latencies
    const int8_t* x = a.x + m0 * a.blocks * kBlock;
    const float* xs = a.x_scales + m0 * a.blocks;
    std::size_t b = 0;
    for (; b + 2 <= a.blocks; b += 2) {
      _mm_prefetch(reinterpret_cast<const char*>(a.w + b * BlockBytes) + 1024, _MM_HINT_T0);
      const __m256i w0 = Load(a.w, b), w1 = Load(a.w, b + 1);
      acc0 = _mm256_fmadd_ps(_mm256_set1_ps(scale_f16c(a, b) * xs[b]),
                             block_products(_mm256_sign_epi8(w0, w0), w0, x + b * kBlock), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_set1_ps(scale_f16c(a, b + 1) * xs[b + 1]),
                             block_products(_mm256_sign_epi8(w1, w1), w1, x + (b + 1) * kBlock), acc1);
    }
    for (; b < a.blocks; ++b) {
      const __m256i w = Load(a.w, b);
      acc0 = _mm256_fmadd_ps(_mm256_set1_ps(scale_f16c(a, b) * xs[b]), block_products(_mm256_sign_epi8(w, w), w, x + b * kBlock), acc0);
    }
    a.y[m0 * a.y_stride] = hsum_avx2(_mm256_add_ps(acc0, acc1));
  }
}

const QuantDotKernels kGeneric{dot_generic<unpack_q8>, dot_generic<unpack_q4>, "generic"};
const QuantDotKernels kAvx2{dot_avx2<load_q8, kBlock>, dot_avx2<load_q4, kBlock / 2>, "avx2"};

}  // namespace

const QuantDotKernels& quant_dot_kernels_generic() { return kGeneric; }
const QuantDotKernels* quant_dot_kernels_avx2() { return dot_kernels_avx2() ? &kAvx2 : nullptr; }

// The AVX-512 dot kernels' processors run the AVX2 integer loop (a 512-bit / VNNI variant is not written yet).
const QuantDotKernels& quant_dot_kernels() {
  static const QuantDotKernels& chosen = same_isa_as_dot_kernels(kGeneric, kAvx2, kAvx2);
  return chosen;
}

}  // namespace qvl::cpu
