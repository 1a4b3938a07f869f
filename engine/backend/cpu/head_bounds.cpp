#include "backend/cpu/head_bounds.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "backend/backend.h"  // head_bounds_bytes
#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/huge_pages.h"
#include "backend/cpu/simd_math.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "core/top_k.h"

namespace qvl::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// head_bounds.cu's constants and their reasons: the factor over the derived 0.5624, the floor for subnormal
// underflow, the ceiling under which no sum of a row's products can overflow.
constexpr float kBoundFactor = 0.6f, kBoundFloor = 1e-30f, kBoundCeiling = 1e30f;
// How far ahead of its reads the bounds pass asks for the copy (quant_dot_kernels.cpp's decode loops' distance).
constexpr std::size_t kPrefetchAhead = 4096;

template <DType T>
float widen(const void* w, int64_t i) {
  if constexpr (T == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  else if constexpr (T == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  else return static_cast<const float*>(w)[i];
}

// One row of the copy, as copy_kernel in head_bounds.cu makes it: per group, s = largest |w| / 127 and
// q = rint(w / s) within ±127, in f32.
template <DType T>
void copy_row(const HeadBoundsCopy& c, int64_t r, int8_t* values, float* scales) {
  const int64_t width = c.width;
  const void* w = static_cast<const char*>(c.weight()) + r * width * int64_t(dtype_size(T));
  float v[kHeadBoundsGroup];
  for (int64_t g = 0; g < c.groups(); ++g) {
    const int64_t begin = g * kHeadBoundsGroup, n = std::min(kHeadBoundsGroup, width - begin);
    // The largest magnitude and whether any value is not finite, on the values' bits (|w|'s bits order as |w| does;
    // an exponent of all ones is inf or NaN): integer loops the compiler vectorises, where the float compares and
    // a call to nearbyint a value below made the 2B's copy take 0.77 s on this project's 2 cores.
    for (int64_t i = 0; i < n; ++i) v[i] = widen<T>(w, begin + i);
    uint32_t largest_bits = 0, not_finite = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t magnitude = std::bit_cast<uint32_t>(v[i]) & 0x7fffffffu;
      largest_bits = std::max(largest_bits, magnitude);
      not_finite |= uint32_t(magnitude >= 0x7f800000u);
    }
    const float largest = std::bit_cast<float>(largest_bits);
    float scale = largest / 127.0f;
    if (not_finite || (largest > 0.0f && !(scale >= std::numeric_limits<float>::min()))) scale = kInf;
    const bool scaled = largest > 0.0f && scale != kInf;
    // rint(v / scale) by adding and taking away 1.5 · 2^23 (ties to even in the default rounding, as rint; |v / scale|
    // <= 127.5 here).
    constexpr float kRound = 12582912.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float q = scaled ? (v[i] / scale + kRound) - kRound : 0.0f;
      values[begin + i] = int8_t(std::min(127.0f, std::max(-127.0f, q)));
    }
    scales[g] = scale;
  }
}

// The bound of one row from its sums: its upper bound, and whether it bounds (else it is always a candidate).
struct RowBound {
  float upper, lower;
  bool sound;
};
// (Multiplies and adds, not std::fma: where the build has no FMA instructions that is a library call; the bound
// allows either.)
inline RowBound row_bound(float product, float scaled_magnitudes) {
  const float bound = scaled_magnitudes * kBoundFactor + kBoundFloor;
  const bool sound = bound <= kBoundCeiling && std::isfinite(product);
  return {sound ? product + bound : kInf, product - bound, sound};
}

// The copy's values kPrefetchAhead ahead, a group's two lines as the loop reaches it, and the scales' line two rows
// ahead (a stream of their own). On the H200 machine's host the pass drew 32 GB/s at 4 threads with a row's 32 lines
// asked for at its start and the scales left to the hardware, 39.0-40.9 GB/s so (the head's bf16 product 42.6-43.4 in
// that call); reading each block as four runs (memory_bandwidth.h) gained nothing there (38.6-42.7 GB/s; 113 against
// 118 at 16 threads).
inline void prefetch_group_ahead(const int8_t* group) {
  _mm_prefetch(reinterpret_cast<const char*>(group) + kPrefetchAhead, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(group) + kPrefetchAhead + 64, _MM_HINT_T0);
}
inline void prefetch_scales_ahead(const float* scales, int64_t groups) {
  for (int64_t line = 0; line < groups * int64_t(sizeof(float)); line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(scales + 2 * groups) + line, _MM_HINT_T0);
}

// The row loop every pass shares: each row's product a (RowProduct: the instruction set's loop over the row's
// groups), its bound b = 0.6 Σ s·H from the groups' scales and the input's magnitudes, its upper bound written, and
// the largest lower bound of the rows that bound.
using RowProduct = float (*)(const int8_t* values, const float* scales, const float* x, int64_t width, int64_t groups);
template <RowProduct Product>
inline float bound_rows_with(const BoundRows& a) {
  float largest_lower = -kInf;
  for (int64_t r = a.begin; r < a.end; ++r) {
    const int8_t* v = a.values + (r - a.begin) * a.width;
    const float* s = a.scales + (r - a.begin) * a.groups;
    float magnitudes = 0.0f;
    for (int64_t g = 0; g < a.groups; ++g) magnitudes += s[g] * a.magnitudes[g];
    const RowBound b = row_bound(Product(v, s, a.x, a.width, a.groups), magnitudes);
    a.upper[r - a.begin] = b.upper;
    if (b.sound) largest_lower = std::max(largest_lower, b.lower);
  }
  return largest_lower;
}

// ---- generic ----
inline float row_product_generic(const int8_t* v, const float* s, const float* x, int64_t width, int64_t groups) {
  float product = 0.0f;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * kHeadBoundsGroup, end = std::min(width, begin + kHeadBoundsGroup);
    float partial = 0.0f;
    for (int64_t i = begin; i < end; ++i) partial += float(v[i]) * x[i];
    product += s[g] * partial;
  }
  return product;
}

// ---- AVX2 + FMA: 8 values a vector, each int8 widened to f32 exactly (sign-extended to int32, converted) ----
QVL_AVX2 inline float row_product_avx2(const int8_t* v, const float* s, const float* x, int64_t width, int64_t groups) {
  prefetch_scales_ahead(s, groups);
  __m256 product = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * kHeadBoundsGroup, end = std::min(width, begin + kHeadBoundsGroup);
    prefetch_group_ahead(v + begin);
    __m256 p0 = _mm256_setzero_ps(), p1 = p0;
    for (int64_t i = begin; i < end; i += 16) {  // the width is a multiple of 16
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i));
      p0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), _mm256_loadu_ps(x + i), p0);
      p1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8))), _mm256_loadu_ps(x + i + 8), p1);
    }
    product = _mm256_fmadd_ps(_mm256_set1_ps(s[g]), _mm256_add_ps(p0, p1), product);
  }
  return hsum_avx2(product);
}

// ---- AVX-512F: 16 values a vector ----
QVL_AVX512 inline __m512 widened16(const int8_t* v) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v))));
}
QVL_AVX512 inline float row_product_avx512(const int8_t* v, const float* s, const float* x, int64_t width, int64_t groups) {
  prefetch_scales_ahead(s, groups);
  __m512 product = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * kHeadBoundsGroup, end = std::min(width, begin + kHeadBoundsGroup);
    prefetch_group_ahead(v + begin);
    __m512 p0 = _mm512_setzero_ps(), p1 = p0;
    int64_t i = begin;
    for (; i + 32 <= end; i += 32) {
      p0 = _mm512_fmadd_ps(widened16(v + i), _mm512_loadu_ps(x + i), p0);
      p1 = _mm512_fmadd_ps(widened16(v + i + 16), _mm512_loadu_ps(x + i + 16), p1);
    }
    if (i < end) p0 = _mm512_fmadd_ps(widened16(v + i), _mm512_loadu_ps(x + i), p0);  // a last 16 (width: 16·n)
    product = _mm512_fmadd_ps(_mm512_set1_ps(s[g]), _mm512_add_ps(p0, p1), product);
  }
  return _mm512_reduce_add_ps(product);
}

// Each instruction set's pass is the shared row loop compiled for it, its row product inlined (flatten: called once a
// row, it cost the AVX-512 pass 2-4% on this project's machine).
__attribute__((flatten)) float bound_rows_generic_impl(const BoundRows& a) { return bound_rows_with<row_product_generic>(a); }
QVL_AVX2 __attribute__((flatten)) float bound_rows_avx2_impl(const BoundRows& a) { return bound_rows_with<row_product_avx2>(a); }
QVL_AVX512 __attribute__((flatten)) float bound_rows_avx512_impl(const BoundRows& a) {
  return bound_rows_with<row_product_avx512>(a);
}

// A block's greedy best: its first largest logit, and whether it computed a NaN.
struct BlockBest {
  float value = -kInf;
  int64_t index = -1;
  bool nan = false;
};

}  // namespace

BoundRowsFn bound_rows_generic() { return bound_rows_generic_impl; }
BoundRowsFn bound_rows_avx2() { return dot_kernels_avx2() ? bound_rows_avx2_impl : nullptr; }
BoundRowsFn bound_rows_avx512() { return dot_kernels_avx512() ? bound_rows_avx512_impl : nullptr; }
BoundRowsFn bound_rows() {
  static const BoundRowsFn chosen = [] {
    const std::string_view isa = dot_kernels().name;
    return isa == "avx512" ? bound_rows_avx512() : isa == "avx2" ? bound_rows_avx2() : nullptr;
  }();
  return chosen;
}

std::optional<HeadBoundsCopy> make_head_bounds(const Tensor& head) {
  const DType t = head.dtype();
  if (head.device() != Device::CPU || head.rank() != 2 || (t != DType::F32 && t != DType::F16 && t != DType::BF16))
    return std::nullopt;
  const uint64_t bytes = head_bounds_bytes(head.dim(0), head.dim(1));
  if (bytes == 0 || !bound_rows()) return std::nullopt;
  HeadBoundsCopy c;
  c.block = empty_on_huge_pages(DType::I8, {int64_t(bytes)});
  if (!c.block.raw()) {
    if (!room_for_copy(bytes)) return std::nullopt;
    c.block = Tensor::empty(DType::I8, {int64_t(bytes)});
  }
  c.head = head, c.rows = head.dim(0), c.width = head.dim(1);
  int8_t* values = c.block.data<int8_t>();
  float* scales = const_cast<float*>(c.scales());
  // Rows in chunks over the threads: each thread's first writes fault its own pages in.
  const auto copy_rows = [&](auto row) {
    ThreadPool::global().parallel_for(std::size_t(c.rows), 256, [&](std::size_t begin, std::size_t end) {
      for (auto r = int64_t(begin); r < int64_t(end); ++r) row(c, r, values + r * c.width, scales + r * c.groups());
    });
  };
  if (t == DType::BF16) copy_rows(copy_row<DType::BF16>);
  else if (t == DType::F16) copy_rows(copy_row<DType::F16>);
  else copy_rows(copy_row<DType::F32>);
  return c;
}

FirstMax head_bounds_pick(const HeadBoundsPick& a) {
  const HeadBoundsCopy& c = *a.copy;
  if (a.vocabulary <= 0 || a.vocabulary > c.rows || a.top_k < 0 || !(a.temperature > 0))
    fail("head_bounds_pick: a vocabulary of ", a.vocabulary, " for ", c.rows, " rows, top-k ", a.top_k, ", temperature ",
         a.temperature);
  const int64_t width = c.width, groups = c.groups();
  std::vector<float> magnitudes(static_cast<std::size_t>(groups), 0.0f);
  for (int64_t i = 0; i < width; ++i) magnitudes[std::size_t(i / kHeadBoundsGroup)] += std::abs(a.x[i]);

  // Fixed blocks of rows (the threshold does not depend on the thread count), handed out from a counter: ~300 for
  // the 2B's vocabulary, at least 128 where the vocabulary has 2,048 rows or more (top-k needs k blocks).
  const int64_t block_rows = std::clamp<int64_t>(a.vocabulary / 128, 16, 512);
  const int64_t blocks = (a.vocabulary + block_rows - 1) / block_rows;
  std::vector<float> lower(static_cast<std::size_t>(blocks));
  const BoundRowsFn bound = bound_rows();
  ThreadPool::global().parallel_chunks(std::size_t(blocks), 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t b = first; b < last; ++b) {
      const int64_t begin = int64_t(b) * block_rows, end = std::min(a.vocabulary, begin + block_rows);
      lower[b] = bound({.values = c.values() + begin * width, .scales = c.scales() + begin * groups, .x = a.x,
                        .magnitudes = magnitudes.data(), .width = width, .groups = groups, .begin = begin, .end = end,
                        .upper = a.logits + begin});
    }
  });

  // The k-th largest of the blocks' largest lower bounds: k blocks each hold a row whose logit is at least it, so the
  // k-th largest logit is too. With fewer blocks than k, -inf: every row a candidate.
  const int64_t k = a.top_k > 0 ? a.top_k : 1;
  float threshold = -kInf;
  if (blocks >= k) {
    std::nth_element(lower.begin(), lower.begin() + (k - 1), lower.end(), std::greater<>());
    threshold = lower[std::size_t(k - 1)];
  }
  const bool top_k = a.top_k > 0;
  const float threshold_t = top_k ? over_temperature(threshold, a.temperature) : threshold;

  // The candidates: every row whose upper bound is not below the threshold (NaN included), its logit computed as the
  // head's product computes a decode row (the dot kernel's one-row loop: a row's sums do not depend on its
  // neighbours). Greedy keeps each block's first largest; top-k sets the other rows to -inf.
  const DotKernels& dot = dot_kernels();
  const std::size_t row_bytes = std::size_t(width) * dtype_size(c.w_type());
  std::vector<BlockBest> best(static_cast<std::size_t>(blocks));
  ThreadPool::global().parallel_chunks(std::size_t(blocks), 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t b = first; b < last; ++b) {
      const int64_t begin = int64_t(b) * block_rows, end = std::min(a.vocabulary, begin + block_rows);
      BlockBest kept;
      for (int64_t r = begin; r < end; ++r) {
        const float upper = a.logits[r];
        const bool candidate = top_k ? !(over_temperature(upper, a.temperature) < threshold_t) : !(upper < threshold);
        if (!candidate) {
          if (top_k) a.logits[r] = -kInf;
          continue;
        }
        float logit = 0.0f;
        dot.dot_tile(a.x, 1, std::size_t(width), static_cast<const char*>(c.weight()) + std::size_t(r) * row_bytes,
                     row_bytes, 1, c.w_type(), &logit, 1);
        a.logits[r] = logit;
        kept.nan = kept.nan || std::isnan(logit);
        if (logit > kept.value) kept.value = logit, kept.index = r;
      }
      best[b] = kept;
    }
  });
  if (top_k) return {};
  // The blocks in order, a later one only when larger: the first index of the largest (0 where every logit is -inf).
  FirstMax pick;
  float top = -kInf;
  for (const BlockBest& b : best) {
    pick.nan = pick.nan || b.nan;
    if (b.index >= 0 && b.value > top) top = b.value, pick.index = std::size_t(b.index);
  }
  return pick;
}

}  // namespace qvl::cpu
