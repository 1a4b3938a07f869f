#pragma once
// f32 activations narrowed to a 16-bit type (round to nearest even), so cuBLAS can multiply them with 16-bit
// weights on tensor cores; and a per-column bias added to a row-major result.
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

void narrow_f32(const float* x, void* out, WeightType type, int64_t count, cudaStream_t stream);
// Its inverse, exact: 16-bit values widened to f32 (keys and values in f16 for a kernel that reads f32 ones).
void widen_to_f32(const void* x, WeightType type, float* out, int64_t count, cudaStream_t stream);
// Whether a row-major rows x cols f32 result at y goes four columns a thread (whole float4s, a 32-bit index): the
// per-column kernels (add_bias, bias_gelu) then take the column from a 32-bit remainder a float4.
bool by_four(const float* y, int64_t rows, int64_t cols);
// y[r, c] += bias[c] for r < rows, c < cols
void add_bias(float* y, const void* bias, WeightType bias_type, int64_t rows, int64_t cols, cudaStream_t stream);
// The same for up to three outputs of one shape in one launch (a batched product's); a null bias adds nothing.
struct Biases {
  float* y[3] = {};
  const void* bias[3] = {};
  int count = 0;
};
void add_biases(const Biases& biases, WeightType bias_type, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace qvl::cuda
