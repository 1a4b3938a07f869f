#pragma once
// Row normalisations over the last dimension: RMSNorm (y = w ⊙ x / rms(x)) and LayerNorm (y = w ⊙ (x − μ)/σ + b).
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

void rms_norm(const float* x, const void* w, WeightType w_type, float eps, float* y, int64_t rows, int64_t width,
              cudaStream_t stream);
void layer_norm(const float* x, const void* w, WeightType w_type, const void* b, WeightType b_type, float eps, float* y,
                int64_t rows, int64_t width, cudaStream_t stream);

}  // namespace qvl::cuda
