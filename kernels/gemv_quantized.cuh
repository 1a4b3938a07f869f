#pragma once
// The decode GEMV with q8 or q4 weights: M <= 4 activation rows quantised per block (quantize_rows), integer dot
// products with dp4a (sm_61 and newer: four int8 products a cycle per lane, where Pascal's f16 arithmetic runs at
// 1/64 rate), the weight's f16 scale and the activation's f32 scale applied per block in f32.
#include <cuda_runtime.h>

#include "quantized_args.h"

namespace qvl::cuda {

void gemv_quantized(const QuantGemvArgs& a, cudaStream_t stream);

}  // namespace qvl::cuda
