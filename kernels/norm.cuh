#pragma once
// Row normalisations over the last dimension: RMSNorm (y = w ⊙ x / rms(x)) and LayerNorm (y = w ⊙ (x − μ)/σ + b).
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

// y is f32 or (an operand for cuBLAS) the 16-bit type y_type names, rounded as narrow_f32 rounds.
void rms_norm(const float* x, const void* w, WeightType w_type, float eps, void* y, WeightType y_type, int64_t rows,
              int64_t width, cudaStream_t stream);
void layer_norm(const float* x, const void* w, WeightType w_type, const void* b, WeightType b_type, float eps, void* y,
                WeightType y_type, int64_t rows, int64_t width, cudaStream_t stream);

}  // namespace qvl::cuda
