#include "backend/cpu/q8_tiles.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/huge_pages.h"
#include "backend/cpu/quant_dot_kernels.h"
#include "backend/cpu/simd_math.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace qvl::cpu {
namespace {

constexpr std::size_t kBlock = 32, kTileBlockBytes = kTileRows * kBlock;  // one block of a tile: 512 bytes
constexpr std::size_t kPrefetchAhead = 4096;  // as the row loop's (quant_dot_kernels.cpp says why)

Tensor uninitialised_like(const Tensor& t) {
  Tensor on_huge = empty_on_huge_pages(t.dtype(), t.shape());
  return on_huge.raw() ? on_huge : Tensor::empty(t.dtype(), t.shape());
}

// Tile t against R activation rows (a prefill pass shares each loaded weight vector among up to four), into
// out[r · out_stride + i] for the tile's rows i < 16. Two accumulators a row, blocks alternating between them. GCC
// keeps them on the stack (indexed by the block's parity), so each block's FMA goes through a store and a load; a
// form with the blocks in pairs and named accumulators, no stack in its loop, was 0.5-4% slower in decode on this
// project's machine (three rounds each, 2 threads; with the eight vpdpbusd also split in two chains, 3-4% slower and
// prefill 7%), so this one, the one measured on the GPU machine's host, stays.
template <int R>
QVL_AVX512_VNNI void tile(const Q8TileProduct& p, std::size_t t, std::size_t r0, float* out, std::size_t out_stride) {
  const LinearWeights& w = *p.w;
  const std::size_t blocks = p.blocks, groups = std::size_t(w.scales.dim(1));
  const int shift = w.group_shift();
  const uint8_t* values = w.weight.data<uint8_t>() + t * (std::size_t(w.weight.dim(1)) / kBlock) * kTileBlockBytes;
  const uint16_t* scales = w.scales.data<uint16_t>() + t * groups * kTileRows;
  __m512 acc[R][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    const uint8_t* block = values + b * kTileBlockBytes;
    __m512i v[8];
    for (int q = 0; q < 8; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(block) + kPrefetchAhead + 64 * q, _MM_HINT_T0);
      v[q] = _mm512_loadu_si512(block + 64 * q);
    }
    const __m512 w_scales = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + (b >> shift) * kTileRows)));
    for (int r = 0; r < R; ++r) {
      const std::size_t xb = (r0 + std::size_t(r)) * blocks + b;
      const int8_t* x = p.x + xb * kBlock;
      __m512i sum = _mm512_set1_epi32(-p.x_sums[xb] * 128);  // the stored +128's share, exactly
      for (int q = 0; q < 8; ++q) {
        int32_t four;  // activation values 4q .. 4q + 3, one to a byte of the lane
        std::memcpy(&four, x + 4 * q, sizeof four);
        sum = _mm512_dpbusd_epi32(sum, v[q], _mm512_set1_epi32(four));
      }
      const __m512 scale = _mm512_mul_ps(w_scales, _mm512_set1_ps(p.x_scales[xb]));
      acc[r][b & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[r][b & 1]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + std::size_t(r) * out_stride, _mm512_add_ps(acc[r][0], acc[r][1]));
}

// Tile t against every activation row, four at a time.
void tile_all_rows(const Q8TileProduct& p, std::size_t t, float* out, std::size_t out_stride) {
  std::size_t r = 0;
  for (; r + 4 <= p.rows; r += 4) tile<4>(p, t, r, out + r * out_stride, out_stride);
  switch (p.rows - r) {
    case 3: tile<3>(p, t, r, out + r * out_stride, out_stride); break;
    case 2: tile<2>(p, t, r, out + r * out_stride, out_stride); break;
    case 1: tile<1>(p, t, r, out + r * out_stride, out_stride); break;
    default: break;
  }
}

}  // namespace

bool q8_tiles_chosen() {
  const QuantDotKernels* vnni = quant_dot_kernels_avx512_vnni();
  return vnni && &quant_dot_kernels() == vnni;
}

bool tileable(const LinearWeights& w) {
  return w.format == WeightFormat::Q8 && !w.tiled && w.weight.device() == Device::CPU && w.rows() > 0 &&
         w.rows() % kTileRows == 0 && w.weight.dim(1) % int64_t(kBlock) == 0;
}

LinearWeights q8_tiles_of(const LinearWeights& w) {
  if (!tileable(w)) fail("q8 tiles: ", shape_to_string(w.weight.shape()), " ", format_traits(w.format).name,
                         " is not a host q8 matrix of whole 16-row tiles");
  if (!quant_dot_kernels_avx512_vnni()) fail("q8 tiles: this processor has no AVX-512 VNNI (the tiles' only kernel)");
  LinearWeights tiled = w;
  tiled.weight = uninitialised_like(w.weight);
  tiled.scales = uninitialised_like(w.scales);
  tiled.tiled = true;
  const std::size_t row_bytes = std::size_t(w.weight.dim(1)), blocks = row_bytes / kBlock,
                    groups = std::size_t(w.scales.dim(1));
  const auto* values = w.weight.data<uint8_t>();
  const auto* scales = w.scales.data<uint16_t>();
  auto* to_values = tiled.weight.data<uint8_t>();
  auto* to_scales = tiled.scales.data<uint16_t>();
  ThreadPool::global().parallel_for(std::size_t(w.rows()) / kTileRows, 1, [&](std::size_t begin, std::size_t end) {
    for (std::size_t t = begin; t < end; ++t) {
      uint8_t* out = to_values + t * blocks * kTileBlockBytes;
      for (std::size_t quad = 0; quad < row_bytes / 4; ++quad, out += 4 * kTileRows)  // block b, quad q: 8b + q
        for (std::size_t r = 0; r < std::size_t(kTileRows); ++r) {
          uint32_t four;
          std::memcpy(&four, values + (t * kTileRows + r) * row_bytes + 4 * quad, 4);
          four ^= 0x80808080u;  // each value + 128
          std::memcpy(out + 4 * r, &four, 4);
        }
      for (std::size_t g = 0; g < groups; ++g)
        for (std::size_t r = 0; r < std::size_t(kTileRows); ++r)
          to_scales[(t * groups + g) * kTileRows + r] = scales[(t * kTileRows + r) * groups + g];
    }
  });
  return tiled;
}

void dequantize_tiled_row(const LinearWeights& w, int64_t r, float* out) {
  if (!w.tiled) fail("dequantize_tiled_row: the matrix is not held as tiles");
  const std::size_t blocks = std::size_t(w.weight.dim(1)) / kBlock, groups = std::size_t(w.scales.dim(1)),
                    t = std::size_t(r) / kTileRows, lane = std::size_t(r) % kTileRows;
  const int shift = w.group_shift();
  const uint8_t* values = w.weight.data<uint8_t>() + t * blocks * kTileBlockBytes + 4 * lane;
  const uint16_t* scales = w.scales.data<uint16_t>() + t * groups * kTileRows + lane;
  for (int64_t i = 0; i < w.in; ++i) {
    const std::size_t b = std::size_t(i) / kBlock, j = std::size_t(i) % kBlock;
    const int8_t value = int8_t(values[b * kTileBlockBytes + (j / 4) * 64 + j % 4] ^ 0x80u);
    out[i] = f16_to_f32(scales[(b >> shift) * kTileRows]) * float(value);
  }
}

void q8_tile_rows(const Q8TileProduct& p, std::size_t begin, std::size_t end) {
  if (!p.w->tiled || p.blocks * kBlock > std::size_t(p.w->weight.dim(1)))
    fail("q8_tile_rows: the matrix is not held as tiles of rows at least ", p.blocks, " blocks long");
  for (std::size_t t = begin / kTileRows; t * kTileRows < end; ++t) {
    const std::size_t first = t * kTileRows;
    if (first >= begin && first + kTileRows <= end) {
      tile_all_rows(p, t, p.y + first, p.y_stride);
      continue;
    }
    // A range that cuts the tile: the whole tile aside, its rows in the range copied.
    std::vector<float> aside(p.rows * kTileRows);
    tile_all_rows(p, t, aside.data(), kTileRows);
    const std::size_t from = std::max(begin, first), to = std::min(end, first + kTileRows);
    for (std::size_t r = 0; r < p.rows; ++r)
      std::copy(aside.begin() + std::ptrdiff_t(r * kTileRows + from - first), aside.begin() + std::ptrdiff_t(r * kTileRows + to - first),
                p.y + r * p.y_stride + from);
  }
}

}  // namespace qvl::cpu
