#pragma once
// Attention as three separate kernels — the unfused reference the fused (flash) kernels are compared with:
//   scores  P[h, i, t] = q_i,h · k_t,kvh · scale where query i may see key t, else −inf
//   softmax P[h, i, :] = softmax(P[h, i, :])
//   weighted out[i, h] = Σ_t P[h, i, t] · v_t,kvh
// The score matrix goes through global memory (written, read and written, read again): the traffic the flash
// kernels avoid. Same masks as flash_attention (causal with `past`, segments with `bounds` on the device, an
// optional block layout); `workspace` holds rows · hq · kv_len floats for the `rows` queries starting at `first`
// (the caller walks the queries in chunks that fit it).
#include <cuda_runtime.h>

#include <cstdint>

#include "attention_args.h"

namespace qvl::cuda {

void attention_scores(const AttentionArgs& a, int64_t first, int64_t rows, float* workspace, cudaStream_t stream);
void attention_softmax(float* workspace, int64_t rows, int64_t hq, int64_t kv_len, cudaStream_t stream);
void attention_weighted_sum(const AttentionArgs& a, int64_t first, int64_t rows, const float* workspace,
                            cudaStream_t stream);

}  // namespace qvl::cuda
