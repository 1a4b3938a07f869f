#include "backend/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/simd_loads.h"
#include "backend/cpu/simd_math.h"
#include "core/error.h"

namespace qvl::cpu {
namespace {

// Runs each(g, pair) for the queries in pairs (pair: std::true_type, the kernel for two) and then the last one alone
// (std::false_type): the row kernels' query counts as their two compiled forms.
template <typename Each>
void by_pairs(std::size_t queries, Each each) {
  std::size_t g = 0;
  for (; g + 2 <= queries; g += 2) each(g, std::true_type{});
  if (g < queries) each(g, std::false_type{});
}

// ---- generic ---------------------------------------------------------------------------------------------------
void score_tile_generic(const float* q, std::size_t rows, std::size_t d, const float* kt, float* out, std::size_t os) {
  for (std::size_t r = 0; r < rows; ++r) {
    float acc[kKeyTile] = {};
    for (std::size_t e = 0; e < d; ++e)
      for (std::size_t j = 0; j < kKeyTile; ++j) acc[j] += q[r * d + e] * kt[e * kKeyTile + j];
    for (std::size_t j = 0; j < kKeyTile; ++j) out[r * os + j] = acc[j];
  }
}

template <DType T>
void score_rows_generic(const float* q, std::size_t queries, const void* k, std::size_t n, std::size_t ks, std::size_t d,
                        float* out, std::size_t os) {
  for (std::size_t g = 0; g < queries; ++g)
    for (std::size_t t = 0; t < n; ++t) {
      float acc = 0;
      for (std::size_t e = 0; e < d; ++e) acc += q[g * d + e] * load1<T>(k, t * ks + e);
      out[g * os + t] = acc;
    }
}

float max_scaled_generic(const float* x, std::size_t n, float scale) {
  float best = -INFINITY;
  for (std::size_t i = 0; i < n; ++i) best = std::max(best, x[i] * scale);
  return best;
}

float exp_scaled_generic(float* x, std::size_t n, float scale, float shift) {
  float sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += x[i] = std::exp(x[i] * scale - shift);
  return sum;
}

template <DType T>
void weighted_rows_generic(const float* p, std::size_t queries, std::size_t ps, const void* v, std::size_t n,
                           std::size_t vs, std::size_t d, float* out) {
  for (std::size_t g = 0; g < queries; ++g) {
    float* const o = out + g * d;
    for (std::size_t e = 0; e < d; ++e) o[e] = 0;
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t e = 0; e < d; ++e) o[e] += p[g * ps + t] * load1<T>(v, t * vs + e);
  }
}

// ---- AVX2 + FMA ------------------------------------------------------------------------------------------------
QVL_AVX2 void score_tile_avx2(const float* q, std::size_t rows, std::size_t d, const float* kt, float* out, std::size_t os) {
  for (std::size_t r = 0; r < rows; ++r) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (std::size_t e = 0; e < d; ++e) {
      const __m256 qe = _mm256_broadcast_ss(q + r * d + e);
      a0 = _mm256_fmadd_ps(qe, _mm256_loadu_ps(kt + e * kKeyTile), a0);
      a1 = _mm256_fmadd_ps(qe, _mm256_loadu_ps(kt + e * kKeyTile + 8), a1);
    }
    _mm256_storeu_ps(out + r * os, a0);
    _mm256_storeu_ps(out + r * os + 8, a1);
  }
}

// Four keys a pass for G queries: each key load (and widening) feeds G FMAs, each query load four, and 4·G chains
// hide the FMA latency; one horizontal sum a score. The query heads that share a kv head (the 2B's two) are one call,
// so their keys are loaded and widened once.
template <DType T, int G>
QVL_AVX2_F16C void score_rows_avx2_for(const float* q, const void* k, std::size_t n, std::size_t ks, std::size_t d,
                                       float* out, std::size_t os) {
  const std::size_t whole = d / 8 * 8;
  std::size_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const std::size_t k0 = t * ks;  // the first key's first element
    __m256 acc[G][4];
    for (auto& row : acc)
      for (auto& a : row) a = _mm256_setzero_ps();
    for (std::size_t e = 0; e < whole; e += 8) {
      __m256 key[4];
      for (std::size_t j = 0; j < 4; ++j) key[j] = load8<T>(k, k0 + j * ks + e);
      for (int g = 0; g < G; ++g) {
        const __m256 qe = _mm256_loadu_ps(q + std::size_t(g) * d + e);
        for (std::size_t j = 0; j < 4; ++j) acc[g][j] = _mm256_fmadd_ps(qe, key[j], acc[g][j]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (std::size_t j = 0; j < 4; ++j) {
        float s = hsum_avx2(acc[g][j]);
        for (std::size_t e = whole; e < d; ++e) s += q[std::size_t(g) * d + e] * load1<T>(k, k0 + j * ks + e);
        out[std::size_t(g) * os + t + j] = s;
      }
  }
  score_rows_generic<T>(q, G, element_at<T>(k, t * ks), n - t, ks, d, out + t, os);  // the last keys
}

template <DType T>
void score_rows_avx2(const float* q, std::size_t queries, const void* k, std::size_t n, std::size_t ks, std::size_t d,
                      float* out, std::size_t os) {
  by_pairs(queries, [&](std::size_t g, auto pair) {
    score_rows_avx2_for<T, decltype(pair)::value ? 2 : 1>(q + g * d, k, n, ks, d, out + g * os, os);
  });
}

// max(product, best) in that order: a NaN product gives best back (MAXPS returns its second operand then).
QVL_AVX2 float max_scaled_avx2(const float* x, std::size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  __m256 best = _mm256_set1_ps(-INFINITY);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) best = _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), best);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, best);
  return std::max(*std::max_element(lanes, lanes + 8), max_scaled_generic(x + i, n - i, scale));
}

QVL_AVX2 float exp_scaled_avx2(float* x, std::size_t n, float scale, float shift) {
  const __m256 s = _mm256_set1_ps(scale), b = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 y = exp_avx2(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), s, b));
    _mm256_storeu_ps(x + i, y);
    sum = _mm256_add_ps(sum, y);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  return total + exp_scaled_generic(x + i, n - i, scale, shift);
}

// Rows outermost: a pass takes 64 / G dimensions of every row in turn for G queries (8 accumulators of the 16
// registers: 64 dimensions for one query, 32 each for two, whose value rows are then loaded and widened once), where
// a pass once took 8 dimensions of every row, 32 bytes of a row 4 KB after the last (the cache's rows are kv_heads x d
// apart). Each output is one chain over the rows in order, whatever the pass width: the same bits for any G. A pass
// of one vector (d under 16, or the last 8 of a row) waits an FMA latency a row.
template <DType T, int G>
QVL_AVX2_F16C void weighted_rows_avx2_for(const float* p, std::size_t ps, const void* v, std::size_t n, std::size_t vs,
                                          std::size_t d, float* out) {
  constexpr std::size_t kVectors = 8 / G;
  std::size_t e = 0;
  for (; e + 8 <= d; e += 8 * kVectors) {
    const std::size_t vectors = std::min<std::size_t>(kVectors, (d - e) / 8);
    __m256 acc[G][kVectors];
    for (auto& row : acc)
      for (auto& a : row) a = _mm256_setzero_ps();
    for (std::size_t t = 0; t < n; ++t) {
      __m256 pt[G];
      for (int g = 0; g < G; ++g) pt[g] = _mm256_broadcast_ss(p + std::size_t(g) * ps + t);
      const std::size_t row = t * vs + e;
      for (std::size_t i = 0; i < kVectors; ++i)
        if (i < vectors) {
          const __m256 x = load8<T>(v, row + 8 * i);
          for (int g = 0; g < G; ++g) acc[g][i] = _mm256_fmadd_ps(pt[g], x, acc[g][i]);
        }
    }
    for (int g = 0; g < G; ++g)
      for (std::size_t i = 0; i < vectors; ++i) _mm256_storeu_ps(out + std::size_t(g) * d + e + 8 * i, acc[g][i]);
    if (vectors < kVectors) {
      e += 8 * vectors;
      break;
    }
  }
  if (e == d) return;
  for (int g = 0; g < G; ++g) {  // the last dimensions, under a vector
    float* const o = out + std::size_t(g) * d;
    for (std::size_t i = e; i < d; ++i) o[i] = 0;
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = e; i < d; ++i) o[i] += p[std::size_t(g) * ps + t] * load1<T>(v, t * vs + i);
  }
}

template <DType T>
void weighted_rows_avx2(const float* p, std::size_t queries, std::size_t ps, const void* v, std::size_t n,
                         std::size_t vs, std::size_t d, float* out) {
  by_pairs(queries, [&](std::size_t g, auto pair) {
    weighted_rows_avx2_for<T, decltype(pair)::value ? 2 : 1>(p + g * ps, ps, v, n, vs, d, out + g * d);
  });
}

// ---- AVX-512F ----------------------------------------------------------------------------------------------------
QVL_AVX512 void score_tile_avx512(const float* q, std::size_t rows, std::size_t d, const float* kt, float* out, std::size_t os) {
  std::size_t r = 0;
  for (; r + 2 <= rows; r += 2) {  // two queries per pass: each key-tile load feeds two FMAs
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    for (std::size_t e = 0; e < d; ++e) {
      const __m512 k = _mm512_loadu_ps(kt + e * kKeyTile);
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[r * d + e]), k, a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(q[(r + 1) * d + e]), k, a1);
    }
    _mm512_storeu_ps(out + r * os, a0);
    _mm512_storeu_ps(out + (r + 1) * os, a1);
  }
  for (; r < rows; ++r) {
    __m512 a = _mm512_setzero_ps();
    for (std::size_t e = 0; e < d; ++e) a = _mm512_fmadd_ps(_mm512_set1_ps(q[r * d + e]), _mm512_loadu_ps(kt + e * kKeyTile), a);
    _mm512_storeu_ps(out + r * os, a);
  }
}

// As score_rows_avx2_for, 16 elements a vector, the last under a mask.
template <DType T, int G>
QVL_AVX512_F16C void score_rows_avx512_for(const float* q, const void* k, std::size_t n, std::size_t ks, std::size_t d,
                                           float* out, std::size_t os) {
  const std::size_t whole = d / 16 * 16;
  for (std::size_t t = 0; t < n; t += 4) {  // four keys a pass (fewer at the end: the missing ones read nothing)
    const std::size_t keys = std::min<std::size_t>(4, n - t), k0 = t * ks;
    __m512 acc[G][4];
    for (auto& row : acc)
      for (auto& a : row) a = _mm512_setzero_ps();
    for (std::size_t e = 0; e < whole; e += 16) {
      __m512 key[4];
      for (std::size_t j = 0; j < keys; ++j) key[j] = load16<T>(k, k0 + j * ks + e);
      for (int g = 0; g < G; ++g) {
        const __m512 qe = _mm512_loadu_ps(q + std::size_t(g) * d + e);
        for (std::size_t j = 0; j < keys; ++j) acc[g][j] = _mm512_fmadd_ps(qe, key[j], acc[g][j]);
      }
    }
    if (whole < d) {  // the last elements under a mask
      __m512 key[4];
      for (std::size_t j = 0; j < keys; ++j) key[j] = load16_first<T>(k, k0 + j * ks + whole, d - whole);
      for (int g = 0; g < G; ++g) {
        const __m512 qe = load16_first<DType::F32>(q + std::size_t(g) * d, whole, d - whole);
        for (std::size_t j = 0; j < keys; ++j) acc[g][j] = _mm512_fmadd_ps(qe, key[j], acc[g][j]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (std::size_t j = 0; j < keys; ++j) out[std::size_t(g) * os + t + j] = _mm512_reduce_add_ps(acc[g][j]);
  }
}

template <DType T>
void score_rows_avx512(const float* q, std::size_t queries, const void* k, std::size_t n, std::size_t ks, std::size_t d,
                      float* out, std::size_t os) {
  by_pairs(queries, [&](std::size_t g, auto pair) {
    score_rows_avx512_for<T, decltype(pair)::value ? 2 : 1>(q + g * d, k, n, ks, d, out + g * os, os);
  });
}

// As max_scaled_avx2; the tail under a mask (its masked-off lanes keep best).
QVL_AVX512 float max_scaled_avx512(const float* x, std::size_t n, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  __m512 best = _mm512_set1_ps(-INFINITY);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) best = _mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), s), best);
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    best = _mm512_mask_max_ps(best, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s), best);
  }
  return _mm512_reduce_max_ps(best);
}

QVL_AVX512 float exp_scaled_avx512(float* x, std::size_t n, float scale, float shift) {
  const __m512 s = _mm512_set1_ps(scale), b = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 y = exp_avx512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), s, b));
    _mm512_storeu_ps(x + i, y);
    sum = _mm512_add_ps(sum, y);
  }
  if (i < n) {  // the tail under a mask: no scalar exp
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    const __m512 y = exp_avx512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + i), s, b));
    _mm512_mask_storeu_ps(x + i, m, y);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, y));
  }
  return _mm512_reduce_add_ps(sum);
}

// Rows outermost, as weighted_rows_avx2_for: 128 dimensions a pass in 8 accumulators a query (16 for two, of the 32
// registers), the last vector under a mask.
template <DType T, int G>
QVL_AVX512_F16C void weighted_rows_avx512_for(const float* p, std::size_t ps, const void* v, std::size_t n,
                                              std::size_t vs, std::size_t d, float* out) {
  for (std::size_t e = 0; e < d; e += 128) {
    const std::size_t width = std::min<std::size_t>(128, d - e), vectors = (width + 15) / 16, whole = width / 16;
    const __mmask16 last = width % 16 ? __mmask16((1u << (width % 16)) - 1) : __mmask16(0xFFFF);
    __m512 acc[G][8];
    for (auto& row : acc)
      for (auto& a : row) a = _mm512_setzero_ps();
    for (std::size_t t = 0; t < n; ++t) {
      __m512 pt[G];
      for (int g = 0; g < G; ++g) pt[g] = _mm512_set1_ps(p[std::size_t(g) * ps + t]);
      const std::size_t row = t * vs + e;
      for (std::size_t i = 0; i < 8; ++i)
        if (i < vectors) {
          const __m512 x = i < whole ? load16<T>(v, row + 16 * i) : load16_first<T>(v, row + 16 * i, width % 16);
          for (int g = 0; g < G; ++g) acc[g][i] = _mm512_fmadd_ps(pt[g], x, acc[g][i]);
        }
    }
    for (int g = 0; g < G; ++g)
      for (std::size_t i = 0; i < vectors; ++i)
        _mm512_mask_storeu_ps(out + std::size_t(g) * d + e + 16 * i, i + 1 < vectors ? __mmask16(0xFFFF) : last, acc[g][i]);
  }
}

template <DType T>
void weighted_rows_avx512(const float* p, std::size_t queries, std::size_t ps, const void* v, std::size_t n,
                         std::size_t vs, std::size_t d, float* out) {
  by_pairs(queries, [&](std::size_t g, auto pair) {
    weighted_rows_avx512_for<T, decltype(pair)::value ? 2 : 1>(p + g * ps, ps, v, n, vs, d, out + g * d);
  });
}

template <DType T>
constexpr CacheRowKernels kGenericRows{score_rows_generic<T>, weighted_rows_generic<T>};
template <DType T>
constexpr CacheRowKernels kAvx2Rows{score_rows_avx2<T>, weighted_rows_avx2<T>};
template <DType T>
constexpr CacheRowKernels kAvx512Rows{score_rows_avx512<T>, weighted_rows_avx512<T>};

const AttentionKernels kGeneric{score_tile_generic, max_scaled_generic, exp_scaled_generic, kGenericRows<DType::F32>,
                                kGenericRows<DType::BF16>, "generic"};
const AttentionKernels kAvx2{score_tile_avx2,       max_scaled_avx2, exp_scaled_avx2, kAvx2Rows<DType::F32>,
                             kAvx2Rows<DType::BF16>, "avx2"};
const AttentionKernels kAvx512{score_tile_avx512,       max_scaled_avx512, exp_scaled_avx512, kAvx512Rows<DType::F32>,
                               kAvx512Rows<DType::BF16>, "avx512"};

}  // namespace

const CacheRowKernels& AttentionKernels::rows(DType type) const {
  if (type == DType::F32) return f32;
  if (type == DType::BF16) return bf16;
  fail("attention: keys and values of type ", dtype_name(type), " (the CPU reads f32 or bf16)");
}

const AttentionKernels& attention_kernels_generic() { return kGeneric; }
const AttentionKernels* attention_kernels_avx2() { return dot_kernels_avx2() ? &kAvx2 : nullptr; }
const AttentionKernels* attention_kernels_avx512() { return dot_kernels_avx512() ? &kAvx512 : nullptr; }

const AttentionKernels& attention_kernels() {
  static const AttentionKernels& chosen = same_isa_as_dot_kernels(kGeneric, kAvx2, kAvx512);
  return chosen;
}

}  // namespace qvl::cpu
