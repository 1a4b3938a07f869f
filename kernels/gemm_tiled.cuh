#pragma once
// y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]) for any shape: f32 activations, weights of any stored type widened to
// f32, f32 math. The GEMM of the SM61 profile (Pascal has no tensor cores and runs f16 math at 1/64 rate) and the
// fallback for shapes the GEMV cannot take.
#include <cuda_runtime.h>

#include <cstdint>

#include "matmul_args.h"

namespace qvl::cuda {

void gemm_tiled(const MatmulArgs& a, cudaStream_t stream);

}  // namespace qvl::cuda
