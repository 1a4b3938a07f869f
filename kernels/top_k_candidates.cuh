#pragma once
// Sampling's temperature and top-k on the device (Backend::top_k_candidates): the candidates core/top_k.h finds on
// the host, handed back as at most a few hundred int64 instead of the whole row of logits.
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

struct TopKCandidatesArgs {
  const float* logits;
  int64_t count;       // the vocabulary: 0 < count <= top_k_candidates_max_count()
  int top_k;           // 0 < top_k <= 64, top_k < count
  double temperature;  // > 0
  int max_candidates;  // <= 128
  int64_t* out;        // {n or -1, NaN seen}, then n pairs (id, the value's f32 bits) in id order: 2 + 2·max_candidates
  void* workspace;     // top_k_candidates_workspace_bytes(), zeroed once by the caller; every call leaves it zeroed
};

int64_t top_k_candidates_max_count();
int64_t top_k_candidates_workspace_bytes();

void top_k_candidates(const TopKCandidatesArgs& args, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
