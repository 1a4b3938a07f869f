#pragma once
// Row gathers and scatters: the embedding lookup (table rows of any stored type to f32) and placing or adding
// image features at the image-token rows; appending to the KV cache at a position held on the device.
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

// y[i] = table[ids[i]] for i < count; ids on the device.
void gather_rows(const void* table, WeightType type, const int64_t* ids, float* y, int64_t count, int64_t width,
                 cudaStream_t stream);
// dst rows [*row, *row + count) = src rows; row on the device (the caller checked the bounds).
void copy_rows_at(const float* src, float* dst, const int64_t* row, int64_t count, int64_t width, cudaStream_t stream);
// x[rows[i]] (+)= src[i]; rows on the device.
void scatter_rows(float* x, const float* src, const int64_t* rows, int64_t count, int64_t width, bool accumulate,
                  cudaStream_t stream);

}  // namespace qvl::cuda
