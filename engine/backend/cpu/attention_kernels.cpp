#include "backend/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/simd_math.h"

namespace qvl::cpu {
namespace {

// ---- generic ---------------------------------------------------------------------------------------------------
void score_tile_generic(const float* q, std::size_t rows, std::size_t d, const float* kt, float* out, std::size_t os) {
  for (std::size_t r = 0; r < rows; ++r) {
    float acc[kKeyTile] = {};
    for (std::size_t e = 0; e < d; ++e)
      for (std::size_t j = 0; j < kKeyTile; ++j) acc[j] += q[r * d + e] * kt[e * kKeyTile + j];
    for (std::size_t j = 0; j < kKeyTile; ++j) out[r * os + j] = acc[j];
  }
}

void score_rows_generic(const float* q, const float* k, std::size_t n, std::size_t ks, std::size_t d, float* out) {
  for (std::size_t t = 0; t < n; ++t) {
    float acc = 0;
    for (std::size_t e = 0; e < d; ++e) acc += q[e] * k[t * ks + e];
    out[t] = acc;
  }
}

float exp_scaled_generic(float* x, std::size_t n, float scale, float shift) {
  float sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += x[i] = std::exp(x[i] * scale - shift);
  return sum;
}

void weighted_rows_generic(const float* p, std::size_t n, const float* v, std::size_t vs, std::size_t d, float* out) {
  for (std::size_t e = 0; e < d; ++e) out[e] = 0;
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t e = 0; e < d; ++e) out[e] += p[t] * v[t * vs + e];
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

// Four keys a pass: each query load feeds four FMAs, and four chains hide the FMA latency; one horizontal sum a key.
QVL_AVX2 void score_rows_avx2(const float* q, const float* k, std::size_t n, std::size_t ks, std::size_t d, float* out) {
  const std::size_t whole = d / 8 * 8;
  std::size_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const float* k0 = k + t * ks;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (std::size_t e = 0; e < whole; e += 8) {
      const __m256 qe = _mm256_loadu_ps(q + e);
      a0 = _mm256_fmadd_ps(qe, _mm256_loadu_ps(k0 + e), a0);
      a1 = _mm256_fmadd_ps(qe, _mm256_loadu_ps(k0 + ks + e), a1);
      a2 = _mm256_fmadd_ps(qe, _mm256_loadu_ps(k0 + 2 * ks + e), a2);
      a3 = _mm256_fmadd_ps(qe, _mm256_loadu_ps(k0 + 3 * ks + e), a3);
    }
    out[t] = hsum_avx2(a0), out[t + 1] = hsum_avx2(a1), out[t + 2] = hsum_avx2(a2), out[t + 3] = hsum_avx2(a3);
    for (std::size_t e = whole; e < d; ++e)
      for (std::size_t j = 0; j < 4; ++j) out[t + j] += q[e] * k0[j * ks + e];
  }
  score_rows_generic(q, k + t * ks, n - t, ks, d, out + t);  // the last keys
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

// Rows outermost: a pass takes 64 dimensions of every row in turn (8 accumulators of the 16 registers; two passes at
// d = 128), where before a pass took 8 dimensions of every row, 32 bytes of a row 4 KB after the last (the cache's
// rows are kv_heads x d apart). The chains are the accumulators: at d = 128 eight of them; a pass of one vector (d
// under 16, or the last 8 of a row) waits an FMA latency a row.
QVL_AVX2 void weighted_rows_avx2(const float* p, std::size_t n, const float* v, std::size_t vs, std::size_t d, float* out) {
  std::size_t e = 0;
  for (; e + 8 <= d; e += 64) {
    const std::size_t vectors = std::min<std::size_t>(8, (d - e) / 8);
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (std::size_t t = 0; t < n; ++t) {
      const __m256 pt = _mm256_broadcast_ss(p + t);
      const float* row = v + t * vs + e;
      for (std::size_t i = 0; i < 8; ++i)
        if (i < vectors) acc[i] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(row + 8 * i), acc[i]);
    }
    for (std::size_t i = 0; i < vectors; ++i) _mm256_storeu_ps(out + e + 8 * i, acc[i]);
    if (vectors < 8) {
      e += 8 * vectors;
      break;
    }
  }
  if (e < d) {
    for (std::size_t i = e; i < d; ++i) out[i] = 0;
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = e; i < d; ++i) out[i] += p[t] * v[t * vs + i];
  }
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

QVL_AVX512 void score_rows_avx512(const float* q, const float* k, std::size_t n, std::size_t ks, std::size_t d, float* out) {
  for (std::size_t t = 0; t < n; t += 4) {  // four keys a pass (fewer at the end: the missing ones read nothing)
    const std::size_t keys = std::min<std::size_t>(4, n - t);
    const float* k0 = k + t * ks;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (std::size_t e = 0; e < d; e += 16) {
      const __mmask16 m = d - e >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (d - e)) - 1);
      const __m512 qe = _mm512_maskz_loadu_ps(m, q + e);
      for (std::size_t j = 0; j < keys; ++j) acc[j] = _mm512_fmadd_ps(qe, _mm512_maskz_loadu_ps(m, k0 + j * ks + e), acc[j]);
    }
    for (std::size_t j = 0; j < keys; ++j) out[t + j] = _mm512_reduce_add_ps(acc[j]);
  }
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

// Rows outermost, as weighted_rows_avx2: 128 dimensions a pass in 8 accumulators, the last vector under a mask.
QVL_AVX512 void weighted_rows_avx512(const float* p, std::size_t n, const float* v, std::size_t vs, std::size_t d, float* out) {
  for (std::size_t e = 0; e < d; e += 128) {
    const std::size_t width = std::min<std::size_t>(128, d - e), vectors = (width + 15) / 16;
    const __mmask16 last = width % 16 ? __mmask16((1u << (width % 16)) - 1) : __mmask16(0xFFFF);
    __m512 acc[8];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (std::size_t t = 0; t < n; ++t) {
      const __m512 pt = _mm512_set1_ps(p[t]);
      const float* row = v + t * vs + e;
      for (std::size_t i = 0; i < 8; ++i)
        if (i < vectors)
          acc[i] = _mm512_fmadd_ps(pt, _mm512_maskz_loadu_ps(i + 1 < vectors ? __mmask16(0xFFFF) : last, row + 16 * i), acc[i]);
    }
    for (std::size_t i = 0; i < vectors; ++i)
      _mm512_mask_storeu_ps(out + e + 16 * i, i + 1 < vectors ? __mmask16(0xFFFF) : last, acc[i]);
  }
}

const AttentionKernels kGeneric{score_tile_generic, score_rows_generic, exp_scaled_generic, weighted_rows_generic, "generic"};
const AttentionKernels kAvx2{score_tile_avx2, score_rows_avx2, exp_scaled_avx2, weighted_rows_avx2, "avx2"};
const AttentionKernels kAvx512{score_tile_avx512, score_rows_avx512, exp_scaled_avx512, weighted_rows_avx512, "avx512"};

}  // namespace

const AttentionKernels& attention_kernels_generic() { return kGeneric; }
const AttentionKernels* attention_kernels_avx2() { return dot_kernels_avx2() ? &kAvx2 : nullptr; }
const AttentionKernels* attention_kernels_avx512() { return dot_kernels_avx512() ? &kAvx512 : nullptr; }

const AttentionKernels& attention_kernels() {
  static const AttentionKernels& chosen = same_isa_as_dot_kernels(kGeneric, kAvx2, kAvx512);
  return chosen;
}

}  // namespace qvl::cpu
