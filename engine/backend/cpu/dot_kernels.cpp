#include "backend/cpu/dot_kernels.h"

#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backend/cpu/simd_loads.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu_features.h"
#include "core/error.h"
#include "core/half.h"

namespace qvl::cpu {
namespace {

// ---- generic ---------------------------------------------------------------------------------------------------
template <typename Load>
void dot_rows_generic_impl(const float* x, std::size_t rows, std::size_t k, Load load, float* y, std::size_t y_stride) {
  for (std::size_t m = 0; m < rows; ++m) {
    const float* xm = x + m * k;
    float acc[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= k; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += xm[i + j] * load(i + j);
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < k; ++i) sum += xm[i] * load(i);
    y[m * y_stride] = sum;
  }
}

void dot_rows_generic(const float* x, std::size_t rows, std::size_t k, const void* w, DType t, float* y, std::size_t ys) {
  switch (t) {
    case DType::F32: {
      const auto* p = static_cast<const float*>(w);
      return dot_rows_generic_impl(x, rows, k, [p](std::size_t i) { return p[i]; }, y, ys);
    }
    case DType::BF16: {
      const auto* p = static_cast<const uint16_t*>(w);
      return dot_rows_generic_impl(x, rows, k, [p](std::size_t i) { return bf16_to_f32(p[i]); }, y, ys);
    }
    case DType::F16: {
      const auto* p = static_cast<const uint16_t*>(w);
      return dot_rows_generic_impl(x, rows, k, [p](std::size_t i) { return f16_to_f32(p[i]); }, y, ys);
    }
    default: fail("linear: weights of type ", dtype_name(t), " are not supported");
  }
}

void dot_tile_generic(const float* x, std::size_t rows, std::size_t k, const void* w, std::size_t w_stride,
                      std::size_t w_rows, DType t, float* y, std::size_t ys) {
  for (std::size_t j = 0; j < w_rows; ++j) dot_rows_generic(x, rows, k, static_cast<const char*>(w) + j * w_stride, t, y + j, ys);
}

// The tile's weight rows; past w_rows the first row again (its sums are computed and dropped), so the kernels keep
// one shape.
void tile_rows(const void* w, std::size_t w_stride, std::size_t w_rows, const void* (&rows)[kDotTileRows]) {
  for (std::size_t j = 0; j < kDotTileRows; ++j) rows[j] = static_cast<const char*>(w) + (j < w_rows ? j : 0) * w_stride;
}

// Software prefetch 2 KB ahead of a weight stream: the hardware prefetchers alone leave a decode GEMV at ~70% of
// the read bandwidth on two cores (measured 16 GB/s against 24 GB/s for a plain sum); with it, ~23 GB/s.
template <DType T>
void prefetch_ahead(const void* w, std::size_t i, std::size_t elements) {
  constexpr std::size_t kSize = T == DType::F32 ? 4 : 2;
  const char* p = static_cast<const char*>(w) + i * kSize + 2048;
  for (std::size_t line = 0; line < elements * kSize; line += 64) _mm_prefetch(p + line, _MM_HINT_T0);
}

// ---- AVX2 + FMA + F16C --------------------------------------------------------------------------------------------

// kDotTileRows weight rows x kX activation rows in 4·kX accumulators (kX = 3: 12 + 3 activation vectors + the
// weight vector = the 16 registers): per 8 elements kX + 4 loads for 4·kX FMAs.
template <DType T, int kX>
QVL_AVX2_F16C void tile_avx2(const float* x, std::size_t k, const void* const* w, std::size_t w_rows, float* y, std::size_t ys) {
  __m256 acc[kDotTileRows][kX];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 xv[kX];
    for (int r = 0; r < kX; ++r) xv[r] = _mm256_loadu_ps(x + std::size_t(r) * k + i);
    for (std::size_t j = 0; j < kDotTileRows; ++j) {
      const __m256 wv = load8<T>(w[j], i);
      for (int r = 0; r < kX; ++r) acc[j][r] = _mm256_fmadd_ps(xv[r], wv, acc[j][r]);
    }
  }
  for (std::size_t j = 0; j < w_rows; ++j)
    for (int r = 0; r < kX; ++r) {
      float s = hsum_avx2(acc[j][r]);
      for (std::size_t e = i; e < k; ++e) s += x[std::size_t(r) * k + e] * load1<T>(w[j], e);
      y[std::size_t(r) * ys + j] = s;
    }
}

// One activation row (decode): the weight rows one after another, two accumulators to hide the FMA latency and
// the stream prefetched. (Four weight rows at a time as a 4 x 1 tile, decode was 14-21% slower on this machine:
// four interleaved streams instead of one.)
template <DType T>
QVL_AVX2_F16C void row_avx2(const float* x, std::size_t k, const void* w, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  std::size_t i = 0;
  for (; i + 16 <= k; i += 16) {
    prefetch_ahead<T>(w, i, 16);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load8<T>(w, i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), load8<T>(w, i + 8), a1);
  }
  for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load8<T>(w, i), a0);
  float s = hsum_avx2(_mm256_add_ps(a0, a1));
  for (; i < k; ++i) s += x[i] * load1<T>(w, i);
  *y = s;
}

template <DType T>
QVL_AVX2_F16C void tiles_avx2(const float* x, std::size_t rows, std::size_t k, const void* const* w, std::size_t w_rows,
                              float* y, std::size_t ys) {
  if (rows == 1) {
    for (std::size_t j = 0; j < w_rows; ++j) row_avx2<T>(x, k, w[j], y + j);
    return;
  }
  std::size_t m = 0;
  for (; m + 3 <= rows; m += 3) tile_avx2<T, 3>(x + m * k, k, w, w_rows, y + m * ys, ys);
  if (rows - m == 2) tile_avx2<T, 2>(x + m * k, k, w, w_rows, y + m * ys, ys);
  if (rows - m == 1) tile_avx2<T, 1>(x + m * k, k, w, w_rows, y + m * ys, ys);
}

// ---- AVX-512F -----------------------------------------------------------------------------------------------------

// As tile_avx2 with 32 registers: kX = 4 (16 accumulators + 4 activation vectors + the weight vector).
template <DType T, int kX>
QVL_AVX512_F16C void tile_avx512(const float* x, std::size_t k, const void* const* w, std::size_t w_rows, float* y,
                                 std::size_t ys) {
  __m512 acc[kDotTileRows][kX];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= k; i += 16) {
    __m512 xv[kX];
    for (int r = 0; r < kX; ++r) xv[r] = _mm512_loadu_ps(x + std::size_t(r) * k + i);
    for (std::size_t j = 0; j < kDotTileRows; ++j) {
      const __m512 wv = load16<T>(w[j], i);
      for (int r = 0; r < kX; ++r) acc[j][r] = _mm512_fmadd_ps(xv[r], wv, acc[j][r]);
    }
  }
  for (std::size_t j = 0; j < w_rows; ++j)
    for (int r = 0; r < kX; ++r) {
      float s = _mm512_reduce_add_ps(acc[j][r]);
      for (std::size_t e = i; e < k; ++e) s += x[std::size_t(r) * k + e] * load1<T>(w[j], e);
      y[std::size_t(r) * ys + j] = s;
    }
}

template <DType T>
QVL_AVX512_F16C void row_avx512(const float* x, std::size_t k, const void* w, float* y) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  std::size_t i = 0;
  for (; i + 32 <= k; i += 32) {
    prefetch_ahead<T>(w, i, 32);
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load16<T>(w, i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), load16<T>(w, i + 16), a1);
  }
  for (; i + 16 <= k; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load16<T>(w, i), a0);
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < k; ++i) s += x[i] * load1<T>(w, i);
  *y = s;
}

template <DType T>
QVL_AVX512_F16C void tiles_avx512(const float* x, std::size_t rows, std::size_t k, const void* const* w,
                                  std::size_t w_rows, float* y, std::size_t ys) {
  if (rows == 1) {
    for (std::size_t j = 0; j < w_rows; ++j) row_avx512<T>(x, k, w[j], y + j);
    return;
  }
  std::size_t m = 0;
  for (; m + 4 <= rows; m += 4) tile_avx512<T, 4>(x + m * k, k, w, w_rows, y + m * ys, ys);
  if (rows - m == 3) tile_avx512<T, 3>(x + m * k, k, w, w_rows, y + m * ys, ys);
  if (rows - m == 2) tile_avx512<T, 2>(x + m * k, k, w, w_rows, y + m * ys, ys);
  if (rows - m == 1) tile_avx512<T, 1>(x + m * k, k, w, w_rows, y + m * ys, ys);
}

// A tile's weight type picked once, for either instruction set's tiles (the loops themselves are written per set:
// a function's target attribute is its own, so a loop cannot be shared between AVX2 and AVX-512).
struct Avx2Tiles {
  template <DType T>
  static void run(const float* x, std::size_t rows, std::size_t k, const void* const* w, std::size_t w_rows, float* y,
                  std::size_t ys) {
    tiles_avx2<T>(x, rows, k, w, w_rows, y, ys);
  }
};
struct Avx512Tiles {
  template <DType T>
  static void run(const float* x, std::size_t rows, std::size_t k, const void* const* w, std::size_t w_rows, float* y,
                  std::size_t ys) {
    tiles_avx512<T>(x, rows, k, w, w_rows, y, ys);
  }
};

template <typename Tiles>
void dot_tile_simd(const float* x, std::size_t rows, std::size_t k, const void* w, std::size_t w_stride,
                   std::size_t w_rows, DType t, float* y, std::size_t ys) {
  const void* row[kDotTileRows];
  tile_rows(w, w_stride, w_rows, row);
  switch (t) {
    case DType::F32: return Tiles::template run<DType::F32>(x, rows, k, row, w_rows, y, ys);
    case DType::BF16: return Tiles::template run<DType::BF16>(x, rows, k, row, w_rows, y, ys);
    case DType::F16: return Tiles::template run<DType::F16>(x, rows, k, row, w_rows, y, ys);
    default: return dot_tile_generic(x, rows, k, w, w_stride, w_rows, t, y, ys);
  }
}

const DotKernels kGeneric{dot_tile_generic, "generic"};
const DotKernels kAvx2{dot_tile_simd<Avx2Tiles>, "avx2"};
const DotKernels kAvx512{dot_tile_simd<Avx512Tiles>, "avx512"};

}  // namespace

const DotKernels& dot_kernels_generic() { return kGeneric; }
const DotKernels* dot_kernels_avx2() {
  const auto& f = cpu_features();
  return f.avx2 && f.fma && f.f16c ? &kAvx2 : nullptr;
}
const DotKernels* dot_kernels_avx512() { return cpu_features().avx512f && dot_kernels_avx2() ? &kAvx512 : nullptr; }

const DotKernels& dot_kernels() {
  static const DotKernels& chosen = []() -> const DotKernels& {
    const char* env = std::getenv("QVL_CPU_KERNELS");
    const std::string_view want = env ? env : "";
    if (want == "generic") return kGeneric;
    if (want == "avx2" && dot_kernels_avx2()) return kAvx2;
    if (want.empty() || want == "avx512")
      if (const auto* k = dot_kernels_avx512()) return *k;
    if (const auto* k = dot_kernels_avx2()) return *k;
    return kGeneric;
  }();
  return chosen;
}

}  // namespace qvl::cpu
