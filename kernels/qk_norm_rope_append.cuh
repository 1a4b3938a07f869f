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
struct QkNormRopeAppendArgs {
  float* q = nullptr;  // [S, Hq, D]
  float* k = nullptr;  // [S, Hkv, D]
  const float* v = nullptr;
  const void* q_norm = nullptr;
  WeightType q_norm_type = WeightType::F32;
  const void* k_norm = nullptr;
  WeightType k_norm_type = WeightType::F32;
  float eps = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
  void* cache_k = nullptr;  // f32, or bf16 where kv_bf16 (rounded to nearest even as they are appended)
  void* cache_v = nullptr;
  bool kv_bf16 = false;
  int64_t row = 0;
  const int64_t* row_on_device = nullptr;
  int64_t s = 0, hq = 0, hkv = 0, d = 0;
  // Prefill rows of heads of 64, 128 or 256 only: the inputs' rows `q_stride` and `kv_stride` elements apart (0: Hq·D
  // and Hkv·D), so that q, k and v may be read where one product left them side by side ([S, (Hq + 2·Hkv)·D] rows);
  // and q rotated into `q_out` ([S, Hq, D]) instead of in place (k is still rotated in place).
  int64_t q_stride = 0, kv_stride = 0;
  float* q_out = nullptr;
};
// Whether the launch takes q_stride, kv_stride and q_out (the warp kernel's rows).
bool qk_norm_rope_append_strided(const QkNormRopeAppendArgs& a);
void qk_norm_rope_append(const QkNormRopeAppendArgs& a, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
