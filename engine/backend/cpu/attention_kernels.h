#pragma once
// The inner loops of CPU attention, one variant per instruction set like the dot kernels (and chosen with them):
// scores of a block of queries against a tile of keys without a horizontal sum per score, the softmax's shift and a
// vectorised exp, and the probability-weighted sum of value rows. A libm exp per score and one horizontal sum per
// (query, key) made the vision attention of a 448x448 image (784 patches, 2B shapes) 4.95 s of an 11.8 s encode on 2
// cores, 2.60 s with these kernels; where the packed GEMM runs, a block's scores and its weighted sum are products
// now (cpu_backend.cpp; docs/performance.md has the figures since).
#include <cstddef>

#include "core/dtype.h"

namespace qvl::cpu {

constexpr std::size_t kKeyTile = 16;  // keys per score tile: one AVX-512 register, two AVX2 registers

// Queries against rows of the KV cache as it stores them (decode: a transposed tile costs more to build than its
// scores save when a single query reads it), for one element type of the cache (f32, or bf16 widened as loaded:
// the same sums as over an f32 cache holding the bf16 values). The queries are the heads that share a kv head (GQA):
// a pair is one pass, each row loaded and widened once for both; every output is the sum a single query gives.
// Strides and offsets count elements.
struct CacheRowKernels {
  // out[g * out_stride + t] = dot(q + g * d, k + t * k_stride) for g < queries, t < n, over d elements.
  void (*score_rows)(const float* q, std::size_t queries, const void* k, std::size_t n, std::size_t k_stride,
                     std::size_t d, float* out, std::size_t out_stride);
  // out[g * d + e] = sum over t < n of p[g * p_stride + t] * v[t * v_stride + e], for g < queries, e < d.
  void (*weighted_rows)(const float* p, std::size_t queries, std::size_t p_stride, const void* v, std::size_t n,
                        std::size_t v_stride, std::size_t d, float* out);
};

struct AttentionKernels {
  // out[r * out_stride + j] = dot(q + r * d, kt column j) for r < rows, j < kKeyTile; kt holds the tile's keys
  // transposed (d rows of kKeyTile), so each query element is broadcast against 16 keys at once.
  void (*score_tile)(const float* q, std::size_t rows, std::size_t d, const float* kt, float* out, std::size_t out_stride);
  // The largest x[i] * scale for i < n (-inf for none; NaN products skipped, as std::max(best, x[i] * scale) does;
  // of equal zeros any sign): a softmax's shift. A scalar loop waits on each max's latency in turn: 784 keys a row
  // of a picture's attention.
  float (*max_scaled)(const float* x, std::size_t n, float scale);
  // x[i] = exp(x[i] * scale - shift) for i < n; returns their sum.
  float (*exp_scaled)(float* x, std::size_t n, float scale, float shift);
  CacheRowKernels f32, bf16;
  const char* name;
  // The row kernels of a cache of `type` (f32 or bf16; anything else throws).
  const CacheRowKernels& rows(DType type) const;
};

// The variant of the same instruction set as dot_kernels() ($QVL_CPU_KERNELS applies to both).
const AttentionKernels& attention_kernels();
const AttentionKernels& attention_kernels_generic();
const AttentionKernels* attention_kernels_avx2();    // nullptr when the processor lacks AVX2/FMA
const AttentionKernels* attention_kernels_avx512();  // nullptr when the processor lacks AVX-512F

}  // namespace qvl::cpu
