#pragma once
// Activations quantised per block of 32 for the integer (dp4a) products with q8/q4 weights: the same arithmetic as
// the CPU's quantize_activation_row (f32 max, scale = max/127, values rounded to nearest even), so both backends feed
// identical integers to their products. A block holding NaN or an infinity gets a NaN scale and zero values.
#include <cuda_runtime.h>

#include "quantized_args.h"

namespace qvl::cuda {

// x [rows, k] f32 -> out (out.rows = rows, out.blocks = ceil(k / 32)).
void quantize_rows(const float* x, int64_t k, const QuantizedRows& out, cudaStream_t stream);

}  // namespace qvl::cuda
