#include "backend/cpu/quant_dot_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu_features.h"
#include "backend/quantize.h"
#include "backend/weight_format.h"
#include "core/error.h"
#include "core/half.h"

namespace qvl::cpu {
namespace {

constexpr std::size_t kBlock = std::size_t(kQuantBlock);
constexpr std::size_t kRowsPerPass = 4;  // prefill: activation rows sharing one loaded (and unpacked) weight block

// Block b's weight scale: a shift, not a division (a 64-bit division per block cost half the loop's time), and the
// f16 widened by F16C where the variant has it.
inline float scale_of(const QuantDot& a, std::size_t b) { return f16_to_f32(a.w_scales[b >> a.group_shift]); }

// q4's kernels take its stored offset off with each activation block's sum.
inline void require_sums(const QuantDot& a, bool q4) {
  if (q4 && !a.x_sums) fail("q4 dot: the activation blocks' sums are missing (quantize_activation_row computes them)");
}

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
QVL_AVX2_F16C inline float scale_f16c(const QuantDot& a, std::size_t b) { return _cvtsh_ss(a.w_scales[b >> a.group_shift]); }

// How far ahead of its reads a decode loop asks for the weights. On the GPU machine's Xeon (2B q8, decode products
// in chunks, medians of three rounds, one call) 4 KB against 1 KB: 19.5 against 18.7 tokens/s at 4 threads, 45.2
// against 42.0 at 16; with fixed shares, none at all 13.6 against 16.9 at 4 threads (the hardware prefetchers alone
// leave a core short of loads in flight); in another call 8 KB was slower than 4; q4 (VNNI there, a third call) no
// different. docs/quantization.md has the rounds.
constexpr std::size_t kPrefetchAhead = 4096;

// Blocks b .. b + 8's weight scales widened at once, and the weight stream of those blocks prefetched kPrefetchAhead
// ahead: the start of an 8-block step of the AVX2 and VNNI loops (b a multiple of 8, b + 8 <= the row's blocks).
// Groups of 32: eight consecutive f16s. Larger groups: the eight blocks share 8 >> g of them (four at 64, two at q8's
// 128, one from 256 up: b .. b + 7 lie in one aligned group there), loaded together, widened and spread over the
// lanes by one permute; gathering the eight one by one took 16 instructions a step, where the q8 products take ~9
// a block (counted from the source).
QVL_AVX2_F16C inline __m256 eight_block_scales(const QuantDot& a, std::size_t b, std::size_t block_bytes) {
  for (std::size_t line = 0; line < 8 * block_bytes; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(a.w + b * block_bytes) + kPrefetchAhead + line, _MM_HINT_T0);
  const uint16_t* ws = a.w_scales;
  const int g = a.group_shift;
  if (g == 0) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ws + b)));
  // The shared scales, no load past them (the last is block b + 7's); constant sizes, so loads rather than a call.
  const uint16_t* shared = ws + (b >> g);
  __m128i bits;
  if (g == 1) {
    bits = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(shared));
  } else if (g == 2) {
    uint32_t two;
    std::memcpy(&two, shared, sizeof two);
    bits = _mm_cvtsi32_si128(int(two));
  } else {
    bits = _mm_cvtsi32_si128(shared[0]);
  }
  const __m256i lane_scale = _mm256_srlv_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(g));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(bits)), lane_scale);
}

QVL_AVX2 inline __m256i load_q8(const uint8_t* w, std::size_t b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + b * kBlock));
}
// q4 as stored, w + 8 in 0..15: low nibbles are values 0..15 of the block, high nibbles 16..31 (one shift puts them
// in the two 128-bit lanes).
QVL_AVX2 inline __m256i load_q4_stored(const uint8_t* w, std::size_t b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + b * kBlock / 2));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
}

// The block's 32 products as 8 int32 partial sums, converted to f32. maddubs multiplies unsigned by signed bytes,
// so the weight's sign moves onto the activation (|w| · sign(w)·x); the pair sums stay below 2·128·127 < 2^15.
QVL_AVX2 inline __m256 block_products(__m256i w_abs, __m256i w, const int8_t* x) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(xv, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// A q4 block's 32 products as 8 f32 partial sums: the stored values (w + 8, unsigned) go straight into maddubs as its
// unsigned operand (no sign tricks and no byte subtraction; one int32 subtraction instead) and each of the 8 int32
// lanes gives back Σx, so the lanes add up to Σ (w + 8)·x − 8·Σx = Σ w·x exactly (pairs stay below 2·15·127; the
// lanes, below 2^24, convert exactly). The f32 addends are not the other kernels' (each lane carries −Σx until the
// final sum), so q4's f32 rounding differs from theirs by more than the order.
QVL_AVX2 inline __m256 block_products_q4(__m256i stored, const int8_t* x, int32_t x_sum) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(stored, xv), _mm256_set1_epi16(1));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(lanes, _mm256_set1_epi32(x_sum)));
}

// The two formats' blocks: a block loaded (and for q8 its magnitudes taken) once, then its 32 products with an
// activation block as 8 f32 partial sums (q4 also reads that block's sum: x_sums[block]).
struct Q8Blocks {
  static constexpr std::size_t kBytes = kBlock;
  struct Loaded {
    __m256i w, w_abs;
  };
  QVL_AVX2 static Loaded load(const uint8_t* w, std::size_t b) {
    const __m256i v = load_q8(w, b);
    return {v, _mm256_sign_epi8(v, v)};
  }
  QVL_AVX2 static __m256 products(const Loaded& w, const int8_t* x, const int32_t* /*x_sums*/, std::size_t /*block*/) {
    return block_products(w.w_abs, w.w, x);
  }
};
struct Q4Blocks {
  static constexpr std::size_t kBytes = kBlock / 2;
  using Loaded = __m256i;
  QVL_AVX2 static Loaded load(const uint8_t* w, std::size_t b) { return load_q4_stored(w, b); }
  QVL_AVX2 static __m256 products(const Loaded& w, const int8_t* x, const int32_t* x_sums, std::size_t block) {
    return block_products_q4(w, x, x_sums[block]);
  }
};

// Two q4 blocks against their activations (blocks b and b + 1 of the 8 a step takes, j = b's place in it / 2): the
// blocks' 32 bytes in one vector (a 128-bit lane each), the low nibbles (values 0..15) and the high ones (16..31) by
// one shift and two ands, the activations' halves put in the same lanes by two lane permutes; one maddubs a half, the
// halves added in int16 (each below 2·2·15·127), madd to int32. Each block leaves 4 int32 lanes, started at −2·Σx of
// their block (4 · 2 = the stored offset's 8), scaled by the block's scale (a permute of the step's eight) into
// acc. 17 instructions for two blocks where one at a time took 24.
QVL_AVX2 inline __m256 two_q4_blocks(const QuantDot& a, std::size_t first, std::size_t b, int j, __m256 scales,
                                     __m256i twice_sums, __m256 acc) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.w + b * kBlock / 2));
  const __m256i low = _mm256_and_si256(raw, _mm256_set1_epi8(15));
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(15));
  const int8_t* x = a.x + (first + b) * kBlock;
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + kBlock));
  const __m256i x_low = _mm256_permute2x128_si256(x0, x1, 0x20), x_high = _mm256_permute2x128_si256(x0, x1, 0x31);
  const __m256i halves = _mm256_add_epi16(_mm256_maddubs_epi16(low, x_low), _mm256_maddubs_epi16(high, x_high));
  const __m256i pick = _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1);
  const __m256i lanes = _mm256_sub_epi32(_mm256_madd_epi16(halves, _mm256_set1_epi16(1)),
                                         _mm256_permutevar8x32_epi32(twice_sums, pick));
  return _mm256_fmadd_ps(_mm256_permutevar8x32_ps(scales, pick), _mm256_cvtepi32_ps(lanes), acc);
}

// Activation row r's blocks against the weight row (decode): eight blocks' weight scales widened
// (eight_block_scales) and multiplied by the activation scales at once, each block's taken by a permute (one
// instruction, where the scalar f16 conversion, product and broadcast took five); q4 two blocks a vector
// (two_q4_blocks); the last blocks one at a time. Two accumulators: independent chains.
template <typename Blocks>
QVL_AVX2_F16C float row_avx2(const QuantDot& a, std::size_t r) {
  const std::size_t first = r * a.blocks;  // the row's first activation block
  const float* xs = a.x_scales + first;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  std::size_t b = 0;
  for (; b + 8 <= a.blocks; b += 8) {
    const __m256 scales = _mm256_mul_ps(eight_block_scales(a, b, Blocks::kBytes), _mm256_loadu_ps(xs + b));
    if constexpr (std::is_same_v<Blocks, Q4Blocks>) {
      const __m256i twice_sums =
          _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x_sums + first + b)), 1);
      for (int j = 0; j < 4; ++j)
        acc[j & 1] = two_q4_blocks(a, first, b + 2 * j, j, scales, twice_sums, acc[j & 1]);
      continue;
    }
    for (int j = 0; j < 8; ++j)
      acc[j & 1] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(j)),
                                   Blocks::products(Blocks::load(a.w, b + j), a.x + (first + b + j) * kBlock, a.x_sums,
                                                    first + b + j),
                                   acc[j & 1]);
  }
  for (; b < a.blocks; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(a.w + b * Blocks::kBytes) + kPrefetchAhead, _MM_HINT_T0);
    acc[b & 1] = _mm256_fmadd_ps(_mm256_set1_ps(scale_f16c(a, b) * xs[b]),
                                 Blocks::products(Blocks::load(a.w, b), a.x + (first + b) * kBlock, a.x_sums, first + b),
                                 acc[b & 1]);
  }
  return hsum_avx2(_mm256_add_ps(acc[0], acc[1]));
}

template <typename Blocks>
QVL_AVX2_F16C void dot_avx2(const QuantDot& a) {
  require_sums(a, std::is_same_v<Blocks, Q4Blocks>);
  std::size_t m0 = 0;
  for (; m0 + kRowsPerPass <= a.rows; m0 += kRowsPerPass) {  // prefill: each loaded block serves four rows
    __m256 acc[kRowsPerPass] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (std::size_t b = 0; b < a.blocks; ++b) {
      const auto w = Blocks::load(a.w, b);
      const float dw = scale_f16c(a, b);
      for (std::size_t r = 0; r < kRowsPerPass; ++r) {
        const std::size_t block = (m0 + r) * a.blocks + b;
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.x_scales[block]),
                                 Blocks::products(w, a.x + block * kBlock, a.x_sums, block), acc[r]);
      }
    }
    for (std::size_t r = 0; r < kRowsPerPass; ++r) a.y[(m0 + r) * a.y_stride] = hsum_avx2(acc[r]);
  }
  for (; m0 < a.rows; ++m0) a.y[m0 * a.y_stride] = row_avx2<Blocks>(a, m0);  // decode
}

// ---- AVX-512 VNNI ---------------------------------------------------------------------------------------------
// vpdpbusd multiplies unsigned by signed bytes and adds each four products into an int32 lane in one instruction
// (AVX2 takes maddubs and madd, through int16). A pass takes 8 blocks: their weight scales widened at once and
// multiplied by each row's activation scales, each block's taken by a permute. q8 goes two blocks a 512-bit vector
// (int32 lanes 0-7 the first block's, 8-15 the second's), q4 four (rows_vnni). The blocks past the last 8 go a pair
// at a time (a lone block with its second half masked off: masked loads read nothing past the row).
struct Q8Pairs {
  static constexpr std::size_t kBytes = kBlock;
  static constexpr bool kOffset = false;
  struct Loaded {
    __m512i magnitude;
    __mmask64 negative;
  };
  QVL_AVX512_VNNI static Loaded load(const uint8_t* w, std::size_t b, bool both) {
    const __m512i v = _mm512_maskz_loadu_epi8(both ? ~0ull : 0xffffffffull, w + b * kBlock);
    return {_mm512_abs_epi8(v), _mm512_movepi8_mask(v)};
  }
  // lanes + |w|·(sign(w)·x), four bytes a lane (x and w in [-127, 127]: the negation cannot overflow).
  QVL_AVX512_VNNI static __m512i products(const Loaded& w, __m512i lanes, const int8_t* x, bool both) {
    const __m512i xv = _mm512_maskz_loadu_epi8(both ? ~0ull : 0xffffffffull, x);
    return _mm512_dpbusd_epi32(lanes, w.magnitude, _mm512_mask_sub_epi8(xv, w.negative, _mm512_setzero_si512(), xv));
  }
};
// q4 as stored (w + 8 in 0..15, unsigned: vpdpbusd's unsigned operand as it is); the lanes start at −Σx of their
// block (kOffset), so a block's eight lanes add up to Σ (w + 8)·x − 8·Σx = Σ w·x, exactly in int32. Only the blocks
// past a row's last 8-block step go in pairs; the steps take four blocks a vector (rows_vnni).
struct Q4Pairs {
  static constexpr std::size_t kBytes = kBlock / 2;
  static constexpr bool kOffset = true;
  using Loaded = __m512i;
  // A block's 16 bytes hold values 0..15 in their low nibbles and 16..31 in their high ones: each block's bytes go to
  // two 128-bit lanes, the second of them shifted down by four.
  QVL_AVX512_VNNI static Loaded load(const uint8_t* w, std::size_t b, bool both) {
    const __m512i raw = _mm512_zextsi256_si512(_mm256_maskz_loadu_epi8(both ? 0xffffffffu : 0xffffu, w + b * kBlock / 2));
    const __m512i twice = _mm512_shuffle_i64x2(raw, raw, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i nibbles = _mm512_mask_blend_epi64(0xcc, twice, _mm512_srli_epi16(twice, 4));
    return _mm512_and_si512(nibbles, _mm512_set1_epi8(15));
  }
  QVL_AVX512_VNNI static __m512i products(const Loaded& w, __m512i lanes, const int8_t* x, bool both) {
    return _mm512_dpbusd_epi32(lanes, w, _mm512_maskz_loadu_epi8(both ? ~0ull : 0xffffffffull, x));
  }
};

// Rows m0 .. m0 + R against the weight row (R = 4 in prefill: each unpacked weight vector serves four rows; R = 1
// in decode), two accumulators a row (independent chains).
//
// q4 takes its 8-block steps four blocks a vector (quads): each 128-bit lane one block's 16 bytes, so one load, one
// shift and two ands give the low nibbles (values 0..15 of the four blocks) and the high ones (16..31), and two
// shuffles put the activations' halves in the same lanes; two vpdpbusd leave each block in 4 int32 lanes, which start
// at −2·Σx of their block (4 · 2 = the offset's 8). 14 instructions for four blocks where pairs took 22.
template <typename Pairs, std::size_t R>
QVL_AVX512_VNNI void rows_vnni(const QuantDot& a, std::size_t m0) {
  constexpr bool kQuads = std::is_same_v<Pairs, Q4Pairs>;
  __m512 acc[R][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  std::size_t b = 0;
  for (; b + 8 <= a.blocks; b += 8) {
    const __m256 w_scales = eight_block_scales(a, b, Pairs::kBytes);
    __m512 scales[R];
    for (std::size_t r = 0; r < R; ++r)
      scales[r] = _mm512_zextps256_ps512(_mm256_mul_ps(w_scales, _mm256_loadu_ps(a.x_scales + (m0 + r) * a.blocks + b)));
    if constexpr (kQuads) {
      __m512i offsets[R];  // −2·Σx of each of the 8 blocks, a row
      for (std::size_t r = 0; r < R; ++r)
        offsets[r] = _mm512_zextsi256_si512(_mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x_sums + (m0 + r) * a.blocks + b)), 1)));
      for (int q = 0; q < 2; ++q) {
        const __m512i raw = _mm512_loadu_si512(a.w + (b + 4 * q) * Pairs::kBytes);
        const __m512i low = _mm512_and_si512(raw, _mm512_set1_epi8(15));
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(raw, 4), _mm512_set1_epi8(15));
        // 128-bit lane L takes block b + 4q + L's scale and offset.
        const __m512i pick = _mm512_set_epi32(4 * q + 3, 4 * q + 3, 4 * q + 3, 4 * q + 3, 4 * q + 2, 4 * q + 2, 4 * q + 2,
                                              4 * q + 2, 4 * q + 1, 4 * q + 1, 4 * q + 1, 4 * q + 1, 4 * q, 4 * q, 4 * q, 4 * q);
        for (std::size_t r = 0; r < R; ++r) {
          // The four blocks' 128 activation bytes: lanes [0 lo, 0 hi, 1 lo, 1 hi] and [2 lo, 2 hi, 3 lo, 3 hi].
          const int8_t* x = a.x + ((m0 + r) * a.blocks + b + 4 * q) * kBlock;
          const __m512i x01 = _mm512_loadu_si512(x), x23 = _mm512_loadu_si512(x + 2 * kBlock);
          const __m512i x_low = _mm512_shuffle_i64x2(x01, x23, _MM_SHUFFLE(2, 0, 2, 0));
          const __m512i x_high = _mm512_shuffle_i64x2(x01, x23, _MM_SHUFFLE(3, 1, 3, 1));
          __m512i lanes = _mm512_permutexvar_epi32(pick, offsets[r]);
          lanes = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(lanes, low, x_low), high, x_high);
          acc[r][q] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick, scales[r]), _mm512_cvtepi32_ps(lanes), acc[r][q]);
        }
      }
    } else {
      for (int p = 0; p < 4; ++p) {
        const auto w = Pairs::load(a.w, b + 2 * p, true);
        const __m512i pick = _mm512_set_epi32(2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                              2 * p + 1, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p);
        for (std::size_t r = 0; r < R; ++r) {
          const std::size_t block = (m0 + r) * a.blocks + b + 2 * p;
          const __m512i lanes = Pairs::products(w, _mm512_setzero_si512(), a.x + block * kBlock, true);
          acc[r][p & 1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick, scales[r]), _mm512_cvtepi32_ps(lanes), acc[r][p & 1]);
        }
      }
    }
  }
  for (; b < a.blocks; b += 2) {  // the last blocks, a pair at a time
    const bool both = b + 1 < a.blocks;
    const auto w = Pairs::load(a.w, b, both);
    const float dw0 = scale_f16c(a, b), dw1 = both ? scale_f16c(a, b + 1) : 0.0f;
    for (std::size_t r = 0; r < R; ++r) {
      const std::size_t block = (m0 + r) * a.blocks + b;
      const __m512 scale = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(dw0 * a.x_scales[block]),
                                                _mm512_set1_ps(both ? dw1 * a.x_scales[block + 1] : 0.0f));
      __m512i start = _mm512_setzero_si512();
      if constexpr (Pairs::kOffset)
        start = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(-a.x_sums[block]),
                                        _mm512_set1_epi32(both ? -a.x_sums[block + 1] : 0));
      const __m512i lanes = Pairs::products(w, start, a.x + block * kBlock, both);
      acc[r][0] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(lanes), acc[r][0]);
    }
  }
  for (std::size_t r = 0; r < R; ++r) a.y[(m0 + r) * a.y_stride] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
}

// Prefill passes of four rows by VNNI; a lone row (decode) by VNNI for q4 and by the AVX2 loop for q8. On the GPU
// machine's Xeon (tools/microbench/cpu_quant_dot.cpp, one thread, k = 2,048, weights in L2; three calls) the q4 quads
// compute 0.81-1.07 ns a block where the pairs took 1.69-2.15 and AVX2 1.17-1.46: the pairs fell short of one
// core's share of memory (~10 GB/s), the quads reach 17-22 GB/s. q8 is memory-bound either way (AVX2 1.25-1.8 ns a
// block, 19-27 GB/s; the VNNI pairs no faster for one row), so its decode keeps the AVX2 loop.
template <typename Pairs, typename DecodeBlocks>
QVL_AVX512_VNNI void dot_vnni(const QuantDot& a) {
  require_sums(a, Pairs::kOffset);
  std::size_t m0 = 0;
  for (; m0 + kRowsPerPass <= a.rows; m0 += kRowsPerPass) rows_vnni<Pairs, kRowsPerPass>(a, m0);
  for (; m0 < a.rows; ++m0) {
    if constexpr (std::is_same_v<DecodeBlocks, Pairs>) rows_vnni<Pairs, 1>(a, m0);
    else a.y[m0 * a.y_stride] = row_avx2<DecodeBlocks>(a, m0);
  }
}

// ---- activation rows -------------------------------------------------------------------------------------------
// quantize_activation_row with a block's 32 values in four vectors: the same max, scale and 1 / scale as the scalar
// code (scalar arithmetic on the block's max), the same product x · inv, rounded by cvtps (the default rounding
// mode: to nearest, ties to even, as nearbyint), so the same bits. A block that is not whole (the row's last) or not
// finite goes through the scalar code.
QVL_AVX2 void quantize_row_avx2(const float* x, int64_t k, int8_t* q, float* scales, int32_t* sums) {
  const int64_t whole = k / kQuantBlock;
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < whole; ++b) {
    const float* xb = x + b * kQuantBlock;
    __m256 v[4], finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1)), top = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(xb + 8 * j);
      finite = _mm256_and_ps(finite, _mm256_cmp_ps(_mm256_sub_ps(v[j], v[j]), _mm256_setzero_ps(), _CMP_EQ_OQ));
      top = _mm256_max_ps(top, _mm256_and_ps(v[j], magnitude));
    }
    if (_mm256_movemask_ps(finite) != 0xff) {  // a NaN or an infinity: the scalar code's NaN scale and zeros
      quantize_activation_row(xb, kQuantBlock, q + b * kQuantBlock, scales + b, sums ? sums + b : nullptr);
      continue;
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
    scales[b] = amax / 127.0f;
    const float inv = amax > 0 && std::isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
    __m256i n[4];
    for (int j = 0; j < 4; ++j) n[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], _mm256_set1_ps(inv)));
    if (sums) {
      const __m256i total = _mm256_add_epi32(_mm256_add_epi32(n[0], n[1]), _mm256_add_epi32(n[2], n[3]));
      __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
      sums[b] = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1))));
    }
    // int32 -> int8 (|n| <= 127: the packs do not saturate); the packs interleave 128-bit lanes, the permute undoes it.
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]), _mm256_packs_epi32(n[2], n[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQuantBlock),
                        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  if (whole * kQuantBlock < k)
    quantize_activation_row(x + whole * kQuantBlock, k - whole * kQuantBlock, q + whole * kQuantBlock, scales + whole,
                            sums ? sums + whole : nullptr);
}

const QuantDotKernels kGeneric{dot_generic<unpack_q8>, dot_generic<unpack_q4>, quantize_activation_row, "generic"};
const QuantDotKernels kAvx2{dot_avx2<Q8Blocks>, dot_avx2<Q4Blocks>, quantize_row_avx2, "avx2"};
const QuantDotKernels kAvx512Vnni{dot_vnni<Q8Pairs, Q8Blocks>, dot_vnni<Q4Pairs, Q4Pairs>, quantize_row_avx2,
                                  "avx512-vnni"};

}  // namespace

const QuantDotKernels& quant_dot_kernels_generic() { return kGeneric; }
const QuantDotKernels* quant_dot_kernels_avx2() { return dot_kernels_avx2() ? &kAvx2 : nullptr; }

const QuantDotKernels* quant_dot_kernels_avx512_vnni() {
  const auto& f = cpu_features();
  return dot_kernels_avx512() && f.avx512bw && f.avx512vl && f.avx512vnni ? &kAvx512Vnni : nullptr;
}

// The AVX-512 dot kernels' processors run the VNNI loop where they have it, the AVX2 one otherwise.
const QuantDotKernels& quant_dot_kernels() {
  static const QuantDotKernels& chosen = same_isa_as_dot_kernels(
      kGeneric, kAvx2, quant_dot_kernels_avx512_vnni() ? *quant_dot_kernels_avx512_vnni() : kAvx2);
  return chosen;
}

}  // namespace qvl::cpu
