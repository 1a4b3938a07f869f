#pragma once
// The GELU forms as device functions, shared by the element-wise kernel and the fused bias + GELU, so both give the
// same bits for the same input.
#include <cuda_runtime.h>

namespace qvl::cuda {

__device__ __forceinline__ float gelu_tanh(float v) {
  return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}
__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f)); }

}  // namespace qvl::cuda
