#pragma once
// q8/q4 weights back to floats on the device: a whole matrix into a workspace (bf16: the prefill and vision GEMMs then
// run as for bf16 weights, cuBLAS on tensor cores; f32 for the SM61 tiled kernel), or the rows of a quantised
// embedding table (the lookup).
#include <cuda_runtime.h>

#include "quantized_args.h"

namespace qvl::cuda {

// out [rows, cols] in `type` (f32, f16 or bf16).
void dequantize(const QuantMatrix& w, void* out, WeightType type, cudaStream_t stream);
// y[i] = w row ids[i], as f32 (ids on the device, checked by the caller).
void gather_quantized_rows(const QuantMatrix& w, const int64_t* ids, float* y, int64_t count, cudaStream_t stream);

}  // namespace qvl::cuda
