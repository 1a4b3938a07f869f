#pragma once
// What the quantised-weight kernels take (quantize_rows.cuh, gemv_quantized.cuh, dequantize.cuh). Plain C++: the
// backend fills it. The packing is engine/backend/quantize.h's: per row, q8 stores one int8 a value and q4 a byte
// per two values (byte j of each 32-value block: value j in the low nibble, value j + 16 in the high one, each + 8),
// rows padded with zeros to whole groups; one f16 scale per group.
#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

constexpr int kQuantBlock = 32;  // values per activation block; weight groups are multiples of it

enum class QuantFormat : int { Q8 = 0, Q4 = 1 };

struct QuantMatrix {
  const uint8_t* values = nullptr;
  const uint16_t* scales = nullptr;  // f16 bits, [rows, groups]
  QuantFormat format = QuantFormat::Q8;
  int64_t rows = 0, cols = 0;  // cols: the input width (rows hold row_bytes, padded)
  int64_t row_bytes = 0, groups = 0;
  int group_shift = 0;  // block b's scale is scales[row · groups + (b >> group_shift)] (groups are powers of two)
};

// Activations quantised per block of kQuantBlock: int8 values (zeros past the row's width), one f32 scale a block and
// the block's sum of values (q4's products subtract 8 · sum: the weights are stored + 8).
struct QuantizedRows {
  int8_t* values = nullptr;  // [rows, blocks · 32]
  float* scales = nullptr;   // [rows, blocks]
  int32_t* sums = nullptr;   // [rows, blocks]
  int64_t rows = 0, blocks = 0;
};

}  // namespace qvl::cuda
