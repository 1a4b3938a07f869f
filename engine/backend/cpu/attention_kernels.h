#pragma once
// The inner loops of CPU attention, one variant per instruction set like the dot kernels (and chosen with them):
// scores of a block of queries against a tile of keys without a horizontal sum per score, a vectorised exp, and the
// probability-weighted sum of value rows. A libm exp per score and one horizontal sum per (query, key) made the
// vision attention of a 448x448 image (784 patches, 2B shapes) 4.95 s of an 11.8 s encode on 2 cores; 2.60 s now.
#include <cstddef>

namespace qvl::cpu {

constexpr std::size_t kKeyTile = 16;  // keys per score tile: one AVX-512 register, two AVX2 registers

struct AttentionKernels {
  // out[r * out_stride + j] = dot(q + r * d, kt column j) for r < rows, j < kKeyTile; kt holds the tile's keys
  // transposed (d rows of kKeyTile), so each query element is broadcast against 16 keys at once.
  void (*score_tile)(const float* q, std::size_t rows, std::size_t d, const float* kt, float* out, std::size_t out_stride);
  // out[t] = dot(q, k + t * k_stride) for t < n, over d elements: one query against keys as the cache stores them
  // (decode: a transposed tile costs more to build than its scores save when a single query reads it).
  void (*score_rows)(const float* q, const float* k, std::size_t n, std::size_t k_stride, std::size_t d, float* out);
  // x[i] = exp(x[i] * scale - shift) for i < n; returns their sum.
  float (*exp_scaled)(float* x, std::size_t n, float scale, float shift);
  // out[e] = sum over t < n of p[t] * v[t * v_stride + e], for e < d.
  void (*weighted_rows)(const float* p, std::size_t n, const float* v, std::size_t v_stride, std::size_t d, float* out);
  const char* name;
};

// The variant of the same instruction set as dot_kernels() ($QVL_CPU_KERNELS applies to both).
const AttentionKernels& attention_kernels();
const AttentionKernels& attention_kernels_generic();
const AttentionKernels* attention_kernels_avx2();    // nullptr when the processor lacks AVX2/FMA
const AttentionKernels* attention_kernels_avx512();  // nullptr when the processor lacks AVX-512F

}  // namespace qvl::cpu
