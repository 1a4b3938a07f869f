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
// dst rows [first, first + count) = src rows, first = *row_on_device where that is set (the caller checked the
// bounds); dst f32, or bf16 where dst_bf16 (a bf16 KV cache: rounded to nearest even).
struct CopyRowsTo {
  const float* src = nullptr;
  void* dst = nullptr;
  bool dst_bf16 = false;
  int64_t first = 0;
  const int64_t* row_on_device = nullptr;
  int64_t count = 0, width = 0;
};
void copy_rows_to(const CopyRowsTo& args, cudaStream_t stream);
// x[i] += ((w[4i]·t[r[4i]] + w[4i+1]·t[r[4i+1]]) + w[4i+2]·t[r[4i+2]]) + w[4i+3]·t[r[4i+3]] for i < count: a
// bilinear interpolation of a position table (the vision tower's), rows and weights on the device.
struct BlendRows {
  float* x = nullptr;
  const void* table = nullptr;
  WeightType table_type = WeightType::F32;
  const int32_t* rows = nullptr;
  const float* weights = nullptr;
  int64_t count = 0, width = 0;
};
void add_blended_rows(const BlendRows& args, cudaStream_t stream);
// x[rows[i]] (+)= src[i]; rows on the device.
void scatter_rows(float* x, const float* src, const int64_t* rows, int64_t count, int64_t width, bool accumulate,
                  cudaStream_t stream);

}  // namespace qvl::cuda
