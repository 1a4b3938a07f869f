#pragma once
// out [S, Hq, D] = softmax(q·kᵀ·scale + mask)·v for q [S, Hq, D] and k, v [T, Hkv, D] (GQA: query head h reads kv
// head h / (Hq / Hkv)). Masks: causal with `past` earlier tokens, or block-diagonal segments (`bounds`, S + 1 entries
// on the device, ascending, 0 ... S). split_keys: the keys of each (query, head) pair are split over several blocks
// (decode, where there are too few pairs to fill the GPU with a warp each); split_workspace holds
// attention_split_workspace floats (nullptr when that is 0). past_on_device (split_keys only): `past` read on the
// device when the kernel runs, kv_len = past + S; the host's kv_len then bounds it (a replayed decode step).
// arrivals (split_keys with a workspace): S·Hq counters, zero before the first call (the kernel leaves them zero).
// overlap: the split kernel is launched to start as the previous kernel drains (common.cuh; SM90+), and the decode
// kernel may merge a pair's chunks in a thread block cluster (SM90's other feature; without overlap, as under the
// SM61 profile, it does not). With overlap the decode kernel (attention_decode.cu) also loads key and value rows
// before `past` (its warps' first tiles), the position on the device and the segment bounds before it waits: the rows
// must come from earlier passes (a decode step's cache) and the position and bounds from host copies, not from
// kernels still running.
#include <cuda_runtime.h>

#include <cstdint>

#include "attention_args.h"

namespace qvl::cuda {

// How the decode kernel splits and where it reads the position (the fields the comment above names).
struct SplitDecode {
  bool split_keys = false;
  const int64_t* past_on_device = nullptr;
  float* workspace = nullptr;
  unsigned* arrivals = nullptr;
  int multiprocessors = 1;
  bool overlap = false;
};

// Segments and causal masks; no block layout (the tiled kernels take those).
void attention(const AttentionArgs& a, const SplitDecode& split, cudaStream_t stream);
// Floats of workspace the split needs (0: one chunk, nothing to merge).
int64_t attention_split_workspace(const AttentionArgs& a, int multiprocessors);

}  // namespace qvl::cuda
