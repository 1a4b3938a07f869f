#pragma once
// Which keys a query may see, shared by the attention kernels (backend.h's AttentionMask, on the device).
#include <cstdint>

namespace qvl::cuda {

// Keys [lo, hi) that query i may see: causal, query i (absolute position past + i) sees [0, past + i]; segments,
// the [bounds[j], bounds[j + 1]) block holding i.
__device__ __forceinline__ void visible_keys(int64_t i, int64_t kv_len, bool causal, int64_t past, const int64_t* bounds,
                                             int64_t segments, int64_t& lo, int64_t& hi) {
  lo = 0;
  hi = kv_len;
  if (causal) {
    hi = min(kv_len, past + i + 1);
    return;
  }
  int64_t seg = 0;
  while (seg + 1 < segments && bounds[seg + 1] <= i) ++seg;
  lo = bounds[seg];
  hi = bounds[seg + 1];
}

}  // namespace qvl::cuda
