#include "backend/cpu/gemm_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu_features.h"
#include "core/cancel.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace qvl::cpu {
namespace {

constexpr std::size_t kMaxNr = 32;

// panel[k][j] for k in [k_begin, k_end) of the panel (elements k0 + k of the rows), a row's segment widened at a time
// (convert_elements): the formats without a transposing loop, and the depth the vector loops leave.
void pack_weights_scalar(const void* w, std::size_t w_stride, DType type, std::size_t cols, std::size_t nr,
                         std::size_t k0, std::size_t k_begin, std::size_t k_end, float* panel) {
  float segment[kGemmDepth];
  for (std::size_t j = 0; j < nr; ++j) {
    if (j < cols)
      convert_elements(type, static_cast<const char*>(w) + j * w_stride + (k0 + k_begin) * dtype_size(type), DType::F32,
                       segment, k_end - k_begin);
    for (std::size_t k = k_begin; k < k_end; ++k) panel[k * nr + j] = j < cols ? segment[k - k_begin] : 0.0f;
  }
}

// ---- AVX2 + FMA + F16C: 6 x 16 ------------------------------------------------------------------------------------
#define QVL_AVX2 __attribute__((target("avx2,fma,f16c")))
constexpr std::size_t kMrAvx2 = 6, kNrAvx2 = 16;

// r[i] = row i's eight 32-bit units -> r[i] = unit i of the eight rows (three rounds of 8 shuffles).
QVL_AVX2 inline void transpose8(__m256i (&r)[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  for (int g = 0; g < 8; g += 4) {
    u[g + 0] = _mm256_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm256_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm256_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm256_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
    r[c + 4] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
  }
}

QVL_AVX2 void pack_weights_avx2(const void* w, std::size_t w_stride, DType type, std::size_t cols, std::size_t k0,
                                std::size_t kc, float* panel) {
  std::size_t k = 0;
  if (type == DType::BF16) {
    // Eight rows x 16 elements: eight units of two bf16 a row, transposed, then each unit's low and high halves
    // widened (an f32 is a bf16 in its top 16 bits).
    const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
    for (; k + 16 <= kc; k += 16)
      for (std::size_t g = 0; g < kNrAvx2; g += 8) {
        __m256i r[8];
        for (std::size_t i = 0; i < 8; ++i)
          r[i] = g + i < cols ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                    static_cast<const char*>(w) + (g + i) * w_stride + (k0 + k) * 2))
                              : _mm256_setzero_si256();
        transpose8(r);
        for (std::size_t u = 0; u < 8; ++u) {
          float* out = panel + (k + 2 * u) * kNrAvx2 + g;
          _mm256_store_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32(r[u], 16)));
          _mm256_store_ps(out + kNrAvx2, _mm256_castsi256_ps(_mm256_and_si256(r[u], high)));
        }
      }
  }
  pack_weights_scalar(w, w_stride, type, cols, kNrAvx2, k0, k, kc, panel);
}

QVL_AVX2 inline __m256i lanes_below(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::min<std::size_t>(n, 8))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Every loop over the tile's rows has a constant bound and is unrolled, so that the accumulators stay in registers
// (a loop to `rows` indexes them: GCC then kept the array on the stack and stored it every step, 32 against 73
// GFLOP/s); the masks are made again after the loop, which needs all 16 registers.
QVL_AVX2 void tile_avx2(const float* a, const float* b, std::size_t kc, float* y, std::size_t ys, std::size_t rows,
                        std::size_t cols, bool first) {
  __m256 c[kMrAvx2][2];
#pragma GCC unroll 8
  for (std::size_t r = 0; r < kMrAvx2; ++r) {
    const bool load = !first && r < rows;
    c[r][0] = load ? _mm256_maskload_ps(y + r * ys, lanes_below(cols)) : _mm256_setzero_ps();
    c[r][1] = load ? _mm256_maskload_ps(y + r * ys + 8, lanes_below(cols > 8 ? cols - 8 : 0)) : _mm256_setzero_ps();
  }
  for (std::size_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + k * kNrAvx2), b1 = _mm256_load_ps(b + k * kNrAvx2 + 8);
#pragma GCC unroll 8
    for (std::size_t r = 0; r < kMrAvx2; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + k * kMrAvx2 + r);
      c[r][0] = _mm256_fmadd_ps(av, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(av, b1, c[r][1]);
    }
  }
  const __m256i m0 = lanes_below(cols), m1 = lanes_below(cols > 8 ? cols - 8 : 0);
#pragma GCC unroll 8
  for (std::size_t r = 0; r < kMrAvx2; ++r)
    if (r < rows) {
      _mm256_maskstore_ps(y + r * ys, m0, c[r][0]);
      _mm256_maskstore_ps(y + r * ys + 8, m1, c[r][1]);
    }
}

// ---- AVX-512F: 8 x 32 ---------------------------------------------------------------------------------------------
#define QVL_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
constexpr std::size_t kMrAvx512 = 8, kNrAvx512 = 32;

// r[i] = row i's sixteen 32-bit units -> r[i] = unit i of the sixteen rows (four rounds of 16 shuffles).
QVL_AVX512 inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  // u[4g + c], 128-bit lane L: unit 4L + c of rows 4g..4g+3.
  for (int g = 0; g < 16; g += 4) {
    u[g + 0] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44), w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
  }
}

QVL_AVX512 void pack_weights_avx512(const void* w, std::size_t w_stride, DType type, std::size_t cols, std::size_t k0,
                                    std::size_t kc, float* panel) {
  std::size_t k = 0;
  if (type == DType::BF16) {
    const __m512i high = _mm512_set1_epi32(int32_t(0xFFFF0000u));
    for (; k + 32 <= kc; k += 32)
      for (std::size_t g = 0; g < kNrAvx512; g += 16) {
        __m512i r[16];
        for (std::size_t i = 0; i < 16; ++i)
          r[i] = g + i < cols ? _mm512_loadu_si512(static_cast<const char*>(w) + (g + i) * w_stride + (k0 + k) * 2)
                              : _mm512_setzero_si512();
        transpose16(r);
        for (std::size_t u = 0; u < 16; ++u) {
          float* out = panel + (k + 2 * u) * kNrAvx512 + g;
          _mm512_store_ps(out, _mm512_castsi512_ps(_mm512_slli_epi32(r[u], 16)));
          _mm512_store_ps(out + kNrAvx512, _mm512_castsi512_ps(_mm512_and_si512(r[u], high)));
        }
      }
  }
  pack_weights_scalar(w, w_stride, type, cols, kNrAvx512, k0, k, kc, panel);
}

// As tile_avx2 (constant-bound, unrolled loops over the rows).
QVL_AVX512 void tile_avx512(const float* a, const float* b, std::size_t kc, float* y, std::size_t ys, std::size_t rows,
                            std::size_t cols, bool first) {
  const auto mask = [](std::size_t n) { return __mmask16(n >= 16 ? 0xFFFFu : (1u << n) - 1); };
  const __mmask16 m0 = mask(cols), m1 = mask(cols > 16 ? cols - 16 : 0);
  __m512 c[kMrAvx512][2];
#pragma GCC unroll 8
  for (std::size_t r = 0; r < kMrAvx512; ++r) {
    const bool load = !first && r < rows;
    c[r][0] = load ? _mm512_maskz_loadu_ps(m0, y + r * ys) : _mm512_setzero_ps();
    c[r][1] = load ? _mm512_maskz_loadu_ps(m1, y + r * ys + 16) : _mm512_setzero_ps();
  }
  for (std::size_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kNrAvx512), b1 = _mm512_load_ps(b + k * kNrAvx512 + 16);
#pragma GCC unroll 8
    for (std::size_t r = 0; r < kMrAvx512; ++r) {
      const __m512 av = _mm512_set1_ps(a[k * kMrAvx512 + r]);
      c[r][0] = _mm512_fmadd_ps(av, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(av, b1, c[r][1]);
    }
  }
#pragma GCC unroll 8
  for (std::size_t r = 0; r < kMrAvx512; ++r)
    if (r < rows) {
      _mm512_mask_storeu_ps(y + r * ys, m0, c[r][0]);
      _mm512_mask_storeu_ps(y + r * ys + 16, m1, c[r][1]);
    }
}

const GemmKernels kAvx2{kMrAvx2, kNrAvx2, 64, pack_weights_avx2, tile_avx2, "avx2"};
const GemmKernels kAvx512{kMrAvx512, kNrAvx512, 32, pack_weights_avx512, tile_avx512, "avx512"};
static_assert(kNrAvx2 <= kMaxNr && kNrAvx512 <= kMaxNr);

}  // namespace

const GemmKernels* gemm_kernels_avx2() { return dot_kernels_avx2() ? &kAvx2 : nullptr; }
const GemmKernels* gemm_kernels_avx512() { return dot_kernels_avx512() ? &kAvx512 : nullptr; }

const GemmKernels* gemm_kernels() {
  static const GemmKernels* const chosen = [] {  // asked by every product: decided once
    const std::string_view isa = dot_kernels().name;
    return isa == "avx512" ? &kAvx512 : isa == "avx2" ? &kAvx2 : nullptr;
  }();
  return chosen;
}

PackedActivations::PackedActivations(const float* x, std::size_t rows, std::size_t k, std::size_t mr)
    : rows_(rows), k_(k), mr_(mr), data_(new float[panels() * mr * k]) {
  // Not zeroed first: every element is written below. Zeroed, the buffer's memset took 746 perf samples beside the
  // copy's 1,280 in a CPU picture's first token (2B shapes, 448² + 40 tokens, this project's 2-core machine; the
  // product tiles ~30,600); now 51. The copy with the panel's rows read side by side (stores in order) took 1,517.
  // Over (panel, block of kGemmDepth) pieces, so that a prefill's 8 panels of 2,048 go to more than two threads.
  const std::size_t blocks = (k + kGemmDepth - 1) / kGemmDepth;
  ThreadPool::global().parallel_for(panels() * blocks, std::max<std::size_t>(1, kMinChunkWork / 4 / (mr * kGemmDepth)),
                                    [&](std::size_t begin, std::size_t end) {
    for (std::size_t piece = begin; piece < end; ++piece) {
      const std::size_t p = piece / blocks, k0 = piece % blocks * kGemmDepth, k1 = std::min(k, k0 + kGemmDepth);
      const std::size_t live = std::min(mr, rows - p * mr);  // the panel's rows that exist; the rest are zeros
      float* out = data_.get() + p * mr * k;
      for (std::size_t r = 0; r < mr; ++r)
        for (std::size_t i = k0; i < k1; ++i) out[i * mr + r] = r < live ? x[(p * mr + r) * k + i] : 0.0f;
    }
  });
}

namespace {

// y[m][j] for j in [begin, end) of every activation row, each panel of weight columns the one pack(j, cols, k0, kc,
// scratch) returns (packed into the scratch, or packed beforehand): the loops every product here shares.
template <typename Pack>
void product_by_panels(const GemmKernels& kernels, const PackedActivations& x, std::size_t k, std::size_t begin,
                       std::size_t end, float* y, std::size_t y_stride, const std::atomic<bool>* stop, Pack pack) {
  alignas(64) float panel[kGemmDepth * kMaxNr];
  const std::size_t mr = kernels.mr;
  if (k == 0) {  // empty sums (the loop below would leave y as it was)
    for (std::size_t m = 0; m < x.rows(); ++m) std::fill(y + m * y_stride + begin, y + m * y_stride + end, 0.0f);
    return;
  }
  for (std::size_t j = begin; j < end; j += kernels.nr) {
    if (stop_requested(stop)) return;
    const std::size_t cols = std::min(kernels.nr, end - j);
    for (std::size_t k0 = 0; k0 < k; k0 += kGemmDepth) {
      const std::size_t kc = std::min(kGemmDepth, k - k0);
      const float* packed = pack(j, cols, k0, kc, panel);
      for (std::size_t p = 0; p < x.panels(); ++p)
        kernels.tile(x.panel(p) + k0 * mr, packed, kc, y + p * mr * y_stride + j, y_stride,
                     std::min(mr, x.rows() - p * mr), cols, k0 == 0);
    }
  }
}

}  // namespace

void gemm_rows(const GemmKernels& kernels, const PackedActivations& x, std::size_t k, const void* w,
               std::size_t w_stride, DType type, std::size_t begin, std::size_t end, float* y, std::size_t y_stride,
               const std::atomic<bool>* stop) {
  const auto* wp = static_cast<const char*>(w);
  product_by_panels(kernels, x, k, begin, end, y, y_stride, stop,
                    [&](std::size_t j, std::size_t cols, std::size_t k0, std::size_t kc, float* panel) {
                      kernels.pack_weights(wp + j * w_stride, w_stride, type, cols, k0, kc, panel);
                      return panel;
                    });
}

void PackedRows::extend(const GemmKernels& kernels, const void* w, std::size_t w_stride, DType type, std::size_t k,
                        std::size_t rows) {
  if (w != w_ || w_stride != w_stride_ || type != type_ || k != k_ || kernels.nr != nr_) {
    w_ = w, w_stride_ = w_stride, type_ = type, k_ = k, nr_ = kernels.nr, rows_ = 0;
  }
  if (rows <= rows_) return;
  const std::size_t whole = rows_ / nr_ * nr_, needed = (rows + nr_ - 1) / nr_ * nr_ * k_;
  if (int64_t(needed) > panels_.numel()) {  // a larger buffer, the whole panels packed so far carried over
    Tensor larger = Tensor::empty(DType::F32, {int64_t(std::max<std::size_t>(needed, 2 * std::size_t(panels_.numel())))});
    if (whole) std::copy_n(panels_.data<float>(), whole * k_, larger.data<float>());
    panels_ = std::move(larger);
  }
  float* data = panels_.data<float>();
  for (std::size_t j = whole; j < rows; j += nr_)
    for (std::size_t k0 = 0; k0 < k_; k0 += kGemmDepth)
      kernels.pack_weights(static_cast<const char*>(w_) + j * w_stride_, w_stride_, type_, std::min(nr_, rows - j), k0,
                           std::min(kGemmDepth, k_ - k0), data + j * k_ + k0 * nr_);
  rows_ = rows;
}

void gemm_packed_rows(const GemmKernels& kernels, const PackedActivations& x, const PackedRows& w, std::size_t n,
                      float* y, std::size_t y_stride) {
  if (n > w.rows()) fail("gemm_packed_rows: ", n, " rows asked for, ", w.rows(), " packed");
  product_by_panels(kernels, x, w.k(), 0, n, y, y_stride, nullptr,
                    [&](std::size_t j, std::size_t, std::size_t k0, std::size_t, float*) { return w.panel(j, k0); });
}

void gemm_by_rows(const GemmKernels& kernels, const PackedActivations& x, std::size_t k, const void* b, DType b_type,
                  std::size_t b_stride, std::size_t b_rows, std::size_t n, float* y, std::size_t y_stride) {
  const std::size_t nr = kernels.nr, element = dtype_size(b_type);
  product_by_panels(kernels, x, k, 0, n, y, y_stride, nullptr,
                    [&](std::size_t j, std::size_t cols, std::size_t k0, std::size_t kc, float* panel) {
                      for (std::size_t i = 0; i < kc; ++i) {  // b's rows as they are stored: no transposition
                        float* out = panel + i * nr;
                        const std::size_t have = k0 + i < b_rows ? cols : 0;
                        if (have > 0)
                          convert_elements(b_type, static_cast<const char*>(b) + ((k0 + i) * b_stride + j) * element,
                                           DType::F32, out, have);
                        std::fill(out + have, out + nr, 0.0f);
                      }
                      return panel;
                    });
}

void gemm_reference(const float* x, std::size_t rows, std::size_t k, const void* w, std::size_t w_stride, DType type,
                    std::size_t w_rows, float* y, std::size_t y_stride) {
  std::vector<float> row(k);
  for (std::size_t j = 0; j < w_rows; ++j) {
    convert_elements(type, static_cast<const char*>(w) + j * w_stride, DType::F32, row.data(), k);
    for (std::size_t m = 0; m < rows; ++m) {
      float acc = 0.0f;
      for (std::size_t i = 0; i < k; ++i) acc = std::fma(x[m * k + i], row[i], acc);
      y[m * y_stride + j] = acc;
    }
  }
}

}  // namespace qvl::cpu
