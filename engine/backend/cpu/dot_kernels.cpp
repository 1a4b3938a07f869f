#include "backend/cpu/dot_kernels.h"

#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

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

// ---- AVX2 + FMA + F16C --------------------------------------------------------------------------------------------
#define QVL_AVX2_F16C __attribute__((target("avx2,fma,f16c")))

QVL_AVX2_F16C inline __m256 load8_avx2(const void* w, DType t, std::size_t i) {
  switch (t) {
    case DType::BF16: {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16 is the top half of f32
    }
    case DType::F16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
    default: return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  }
}

// Software prefetch 2 KB ahead of the weight stream: the hardware prefetchers alone leave a decode GEMV at ~70% of
// the read bandwidth on two cores (measured 16 GB/s against 24 GB/s for a plain sum); with it, ~23 GB/s.
inline void prefetch_ahead(const void* w, DType t, std::size_t i, std::size_t elements) {
  const std::size_t size = t == DType::F32 ? 4 : 2;
  const char* p = static_cast<const char*>(w) + i * size + 2048;
  for (std::size_t line = 0; line < elements * size; line += 64) _mm_prefetch(p + line, _MM_HINT_T0);
}

float load1(const void* w, DType t, std::size_t i) {
  switch (t) {
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
    default: return static_cast<const float*>(w)[i];
  }
}

QVL_AVX2_F16C void dot_rows_avx2(const float* x, std::size_t rows, std::size_t k, const void* w, DType t, float* y, std::size_t ys) {
  if (t != DType::F32 && t != DType::BF16 && t != DType::F16) return dot_rows_generic(x, rows, k, w, t, y, ys);
  std::size_t m = 0;
  // Four activation rows per pass: each widened weight vector feeds four FMAs.
  for (; m + 4 <= rows; m += 4) {
    const float* x0 = x + m * k;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 8 <= k; i += 8) {
      const __m256 wv = load8_avx2(w, t, i);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i), wv, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + k + i), wv, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + 2 * k + i), wv, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + 3 * k + i), wv, a3);
    }
    float s[4] = {hsum_avx2(a0), hsum_avx2(a1), hsum_avx2(a2), hsum_avx2(a3)};
    for (; i < k; ++i) {
      const float wi = load1(w, t, i);
      for (int r = 0; r < 4; ++r) s[r] += x0[std::size_t(r) * k + i] * wi;
    }
    for (int r = 0; r < 4; ++r) y[(m + std::size_t(r)) * ys] = s[r];
  }
  for (; m < rows; ++m) {
    const float* xm = x + m * k;
    // Two accumulators hide the FMA latency on the single-row (decode) path.
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    std::size_t i = 0;
    for (; i + 16 <= k; i += 16) {
      prefetch_ahead(w, t, i, 16);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xm + i), load8_avx2(w, t, i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xm + i + 8), load8_avx2(w, t, i + 8), a1);
    }
    for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xm + i), load8_avx2(w, t, i), a0);
    float s = hsum_avx2(_mm256_add_ps(a0, a1));
    for (; i < k; ++i) s += xm[i] * load1(w, t, i);
    y[m * ys] = s;
  }
}

// ---- AVX-512F -----------------------------------------------------------------------------------------------------
#define QVL_AVX512_F16C __attribute__((target("avx512f,avx2,fma,f16c")))

QVL_AVX512_F16C inline __m512 load16_avx512(const void* w, DType t, std::size_t i) {
  switch (t) {
    case DType::BF16: {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case DType::F16:
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i)));
    default: return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  }
}

QVL_AVX512_F16C void dot_rows_avx512(const float* x, std::size_t rows, std::size_t k, const void* w, DType t, float* y, std::size_t ys) {
  if (t != DType::F32 && t != DType::BF16 && t != DType::F16) return dot_rows_generic(x, rows, k, w, t, y, ys);
  std::size_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    const float* x0 = x + m * k;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 16 <= k; i += 16) {
      const __m512 wv = load16_avx512(w, t, i);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x0 + i), wv, a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x0 + k + i), wv, a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x0 + 2 * k + i), wv, a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x0 + 3 * k + i), wv, a3);
    }
    float s[4] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1), _mm512_reduce_add_ps(a2), _mm512_reduce_add_ps(a3)};
    for (; i < k; ++i) {
      const float wi = load1(w, t, i);
      for (int r = 0; r < 4; ++r) s[r] += x0[std::size_t(r) * k + i] * wi;
    }
    for (int r = 0; r < 4; ++r) y[(m + std::size_t(r)) * ys] = s[r];
  }
  for (; m < rows; ++m) {
    const float* xm = x + m * k;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    std::size_t i = 0;
    for (; i + 32 <= k; i += 32) {
      prefetch_ahead(w, t, i, 32);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xm + i), load16_avx512(w, t, i), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xm + i + 16), load16_avx512(w, t, i + 16), a1);
    }
    for (; i + 16 <= k; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xm + i), load16_avx512(w, t, i), a0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < k; ++i) s += xm[i] * load1(w, t, i);
    y[m * ys] = s;
  }
}

const DotKernels kGeneric{dot_rows_generic, "generic"};
const DotKernels kAvx2{dot_rows_avx2, "avx2"};
const DotKernels kAvx512{dot_rows_avx512, "avx512"};

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
