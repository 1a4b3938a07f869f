#pragma once
// Fused attention prologue of a decoder layer: per-head RMSNorm of q and k, rotary embedding of both, and k and v
// appended to the KV cache. Unfused that is six launches (two norms, two ropes, two row copies) each moving a few
// KB at decode, so the launches and the gaps between them are the cost; fused it is one launch, and q/k are read
// and written once.
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

// q [S, Hq, D] and k [S, Hkv, D] normalised and rotated in place; cache_k/cache_v rows [row + s] = k[s], v[s] where
// row is *row_on_device when that is non-null. cos, sin: [S, D]. D even, at most 512. overlap: launched to start as
// the previous kernel drains (common.cuh; SM90+).
void qk_norm_rope_append(float* q, float* k, const float* v, const void* q_norm, WeightType q_norm_type, const void* k_norm,
                         WeightType k_norm_type, float eps, const float* cos, const float* sin, float* cache_k,
                         float* cache_v, int64_t row, const int64_t* row_on_device, int64_t s, int64_t hq, int64_t hkv,
                         int64_t d, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
