#include "backend/cpu/activation_kernels.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/simd_math.h"

namespace qvl::cpu {
namespace {

constexpr float kGeluC = 0.7978845608028654f, kGeluK = 0.044715f;

// ---- generic: the textbook formulas, the reference for the others ------------------------------------------------
void gelu_tanh_generic(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::tanh(kGeluC * (x[i] + kGeluK * x[i] * x[i] * x[i])));
}
void silu_mul_generic(const float* g, const float* u, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// ---- AVX2 ----------------------------------------------------------------------------------------------------------
QVL_AVX2 inline __m256 gelu_avx2(__m256 x) {  // x / (1 + exp(-2c (x + k x^3)))
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 z = _mm256_mul_ps(_mm256_set1_ps(-2.0f * kGeluC), _mm256_fmadd_ps(_mm256_set1_ps(kGeluK), x3, x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_avx2(z)));
}
// The last values of a range (fewer than 8), zero-padded to a vector: they go through the vector formula too, so
// every value gets the same bits wherever a call's range starts and ends (the CPU's fused SwiGLU applies it to each
// chunk of a row's columns, and must give the unfused pass's bits).
struct Tail8 {
  alignas(32) float a[8] = {}, b[8] = {}, out[8] = {};
  std::size_t n;
  Tail8(const float* pa, const float* pb, std::size_t count) : n(count) {
    std::copy_n(pa, n, a);
    std::copy_n(pb, n, b);
  }
  void store(float* y) const { std::copy_n(out, n, y); }
};
QVL_AVX2 void gelu_tanh_avx2(const float* x, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu_avx2(_mm256_loadu_ps(x + i)));
  if (i < n) {
    Tail8 tail(x + i, x + i, n - i);
    _mm256_store_ps(tail.out, gelu_avx2(_mm256_load_ps(tail.a)));
    tail.store(y + i);
  }
}
QVL_AVX2 inline __m256 silu_mul_vector_avx2(__m256 g, __m256 u) {
  const __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g))));
  return _mm256_mul_ps(s, u);
}
QVL_AVX2 void silu_mul_avx2(const float* g, const float* u, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu_mul_vector_avx2(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < n) {
    Tail8 tail(g + i, u + i, n - i);
    _mm256_store_ps(tail.out, silu_mul_vector_avx2(_mm256_load_ps(tail.a), _mm256_load_ps(tail.b)));
    tail.store(y + i);
  }
}

// ---- AVX-512 -------------------------------------------------------------------------------------------------------
QVL_AVX512 inline __m512 gelu_avx512(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 z = _mm512_mul_ps(_mm512_set1_ps(-2.0f * kGeluC), _mm512_fmadd_ps(_mm512_set1_ps(kGeluK), x3, x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_avx512(z)));
}
QVL_AVX512 void gelu_tanh_avx512(const float* x, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu_avx512(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, gelu_avx512(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
QVL_AVX512 inline __m512 silu_avx512(__m512 g) {
  return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
}
QVL_AVX512 void silu_mul_avx512(const float* g, const float* u, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(silu_avx512(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(silu_avx512(_mm512_maskz_loadu_ps(m, g + i)), _mm512_maskz_loadu_ps(m, u + i)));
  }
}

const ActivationKernels kGeneric{gelu_tanh_generic, silu_mul_generic, "generic"};
const ActivationKernels kAvx2{gelu_tanh_avx2, silu_mul_avx2, "avx2"};
const ActivationKernels kAvx512{gelu_tanh_avx512, silu_mul_avx512, "avx512"};

}  // namespace

const ActivationKernels& activation_kernels_generic() { return kGeneric; }
const ActivationKernels* activation_kernels_avx2() { return dot_kernels_avx2() ? &kAvx2 : nullptr; }
const ActivationKernels* activation_kernels_avx512() { return dot_kernels_avx512() ? &kAvx512 : nullptr; }

const ActivationKernels& activation_kernels() {
  static const ActivationKernels& chosen = same_isa_as_dot_kernels(kGeneric, kAvx2, kAvx512);
  return chosen;
}

}  // namespace qvl::cpu
