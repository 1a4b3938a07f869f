#pragma once
// Rotary embedding in place on x [S, H, D] with per-row tables cos, sin [S, D]: rotate_half pairs (d, d + D/2).
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

void rope(float* x, const float* cos, const float* sin, int64_t s, int64_t h, int64_t d, cudaStream_t stream);

}  // namespace qvl::cuda
