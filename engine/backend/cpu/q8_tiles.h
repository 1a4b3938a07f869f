#pragma once
// q8 matrices as the CPU backend holds them on processors with AVX-512 VNNI: tiles of 16 rows, so that one 64-byte
// load holds four values of each of 16 rows and one vpdpbusd multiplies them by four activation values broadcast
// (64 multiply-adds an instruction, no horizontal sums, the 16 rows' scales widened by one instruction).
//
// Why: a decode step streams every weight once and is bound by how much memory each core keeps in flight, and the
// row-by-row loop (quant_dot_kernels.cpp: ~9 instructions a 32-byte block, sign tricks, a permute for each block's
// scale) left less of the core for that. Here a 512-byte block of a tile takes 54 (the compiled decode loop, eight
// of them prefetches): ~3.4 a 32 bytes. On the GPU machine's Xeon (2B q8,
// `bench --prompt-tokens 16 --decode-tokens 32`, one call, 9a60b9b built beside, llama.cpp's Q8_0 in the same rounds)
// decode went from 23.5-26.8 to 27.4-34.2 tokens/s at 4 threads (Q8_0 22.8-27.0: 1.15-1.27x in five rounds), the
// products from 41-54 to 49-64 GB/s, and prefill of 64 tokens from 101-121 to 258 tokens/s (Q8_0 227-239). llama.cpp's
// AMX code packs 16 rows a tile for vpdpbusd too. Processors without VNNI keep rows: AVX2 has no instruction
// that multiplies unsigned by signed bytes into int32 without int16 saturation (docs/quantization.md).
//
// Layout, for a [rows, blocks · 32] q8 matrix (rows a multiple of 16) and its [rows, groups] f16 scales:
//   values: tile t, block b, quad q (0..7): 64 bytes, row r's values b·32 + 4q .. + 3 at bytes 4r .. 4r + 3, each
//           stored as value + 128 (unsigned: vpdpbusd's unsigned operand). Σ (w + 128)·x = Σ w·x + 128·Σx, and the
//           activation block's Σx is known when it is quantised (quantize.h), so the 128·Σx comes off exactly in
//           int32 with no bytes added to the weights.
//   scales: tile t, group g: the 16 rows' f16 scales of group g.
// The same bytes as rows (LinearWeights::nbytes, the memory plan and the roofline are unchanged); the tensors keep
// their shapes, and LinearWeights::tiled says which layout they hold.
#include <cstddef>
#include <cstdint>

#include "backend/weight_format.h"

namespace qvl::cpu {

constexpr int64_t kTileRows = 16;

// Whether the CPU backend holds q8 matrices as tiles: the chosen quant kernels are the VNNI ones
// (quant_dot_kernels(); $QVL_CPU_KERNELS applies).
bool q8_tiles_chosen();

// Whether `w` can be held as tiles: q8, host memory, rows laid out as rows, a multiple of 16 of them.
bool tileable(const LinearWeights& w);

// `w` (tileable) as tiles, on huge pages where they are offered (huge_pages.h), over the threads.
LinearWeights q8_tiles_of(const LinearWeights& w);

// Row r of the tiled `w` dequantised into out[0, w.in): an embedding lookup (dequantize_row's values).
void dequantize_tiled_row(const LinearWeights& w, int64_t r, float* out);

struct Q8TileProduct {
  const int8_t* x = nullptr;        // activation rows x blocks·32, quantised per block (quantize.h)
  const float* x_scales = nullptr;  // rows x blocks
  const int32_t* x_sums = nullptr;  // rows x blocks: each block's Σx
  std::size_t rows = 0;             // activation rows
  std::size_t blocks = 0;           // blocks an activation row (a weight row may be padded past them to whole groups)
  const LinearWeights* w = nullptr;  // tiled
  float* y = nullptr;               // y[r · y_stride + j] for weight row j
  std::size_t y_stride = 0;
};

// Weight rows [begin, end) of the tiled `w` against every activation row (any range: rows of a tile outside it are
// computed aside and not written).
void q8_tile_rows(const Q8TileProduct& p, std::size_t begin, std::size_t end);

}  // namespace qvl::cpu
