#pragma once
// Activations quantised per block of 32 for the integer (dp4a) products with q8/q4 weights, optionally after the
// input RMSNorm (folded in: the plain RMSNorm kernel's code, so its bits). The arithmetic is the CPU's
// quantize_activation_row (f32 maximum, scale = max/127, values rounded to nearest even), so both backends feed
// identical integers to their products. A block holding NaN or an infinity gets a NaN scale and zero values.
#include <cuda_runtime.h>

#include "gemv.cuh"
#include "quantized_args.h"

namespace qvl::cuda {

// x [out.rows, k] f32 -> out (out.blocks = ceil(k / 32)); norm.w == nullptr: no norm. overlap: programmatic
// dependent launch (common.cuh).
void quantize_rows(const float* x, int64_t k, const GemvNorm& norm, const QuantizedRows& out, bool overlap,
                   cudaStream_t stream);

}  // namespace qvl::cuda
