#pragma once
// The bias and GELU after a cuBLAS GEMM in one pass: y = gelu(y + bias) over [rows, cols]. Unfused, the bias kernel
// writes y and the GELU reads it back: two launches and four passes over y instead of one and two (the vision MLP's
// [patches, 4096] activations, 24 times an image).
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

void bias_gelu(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, bool tanh_form,
               cudaStream_t stream);

}  // namespace qvl::cuda
