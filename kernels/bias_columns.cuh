#pragma once
// The loop of the per-column kernels after a GEMM (add_bias in convert.cu, bias_gelu.cu): y[r, c] = op(y[r, c],
// bias[c]) over a row-major rows x cols f32 result. Four columns a thread where by_four (convert.cuh) says whole
// float4s fit a 32-bit index, the column from a 32-bit remainder: the flat loop with a 64-bit `i % cols` an element
// took 10-14 us for 784 x 1024 on an H100 (ncu), about 4x what its 6.4 MB take. Other shapes: an element a thread.
#include <algorithm>
#include <cstdint>

#include "weights.cuh"

namespace qvl::cuda {

// out[r, c] = op(y[r, c], bias[c]); out may be y, or the next GEMM's 16-bit operand (Y: uint16_t for bf16, __half),
// stored rounded as narrow_f32 rounds (the same bits as the f32 result converted).
template <typename Y, typename Op>
__device__ __forceinline__ void for_each_with_bias(const float* y, Y* out, const void* bias, WeightType bias_type,
                                                   int64_t rows, int64_t cols, bool four, Op op) {
  if (four) {
    const int quads = int(rows * cols / 4), row_quads = int(cols / 4);
    for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < quads; i += int(gridDim.x * blockDim.x)) {
      const int c = (i % row_quads) * 4;
      float4 v = reinterpret_cast<const float4*>(y)[i];
      v.x = op(v.x, load_weight(bias, bias_type, c)), v.y = op(v.y, load_weight(bias, bias_type, c + 1));
      v.z = op(v.z, load_weight(bias, bias_type, c + 2)), v.w = op(v.w, load_weight(bias, bias_type, c + 3));
      store4(out, int64_t(i) * 4, v);
    }
    return;
  }
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_as(out, i, op(y[i], load_weight(bias, bias_type, i % cols)));
}

// Blocks of 256 threads for the loop above.
inline unsigned bias_blocks(int64_t rows, int64_t cols, bool four) {
  return unsigned(std::min<int64_t>(((four ? rows * cols / 4 : rows * cols) + 255) / 256, 4096));
}

}  // namespace qvl::cuda
