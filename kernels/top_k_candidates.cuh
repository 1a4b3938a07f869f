#pragma once
// Sampling's temperature and top-k on the device (Backend::top_k_candidates): the candidates core/top_k.h finds on
// the host, handed back as at most a few hundred int64 instead of the whole row of logits; and, where asked, top-p
// and the draw from them in the same launch (draw_from_candidates.cuh).
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

constexpr int kTopKMax = 64;              // the largest top-k the kernel takes
constexpr int kTopKMaxCandidates = 128;   // the most ids it hands back (ties can keep more than k)

struct TopKCandidatesArgs {
  const float* logits;
  int64_t count;       // the vocabulary: 0 < count <= top_k_candidates_max_count()
  int top_k;           // 0 < top_k <= kTopKMax, top_k < count
  double temperature;  // > 0
  // {n, NaN seen}, then n pairs (id, the value's f32 bits) in id order: 2 + 2·kTopKMaxCandidates. n -1: more than
  // kTopKMaxCandidates, a tie at the k-th largest that a block did not list, or give_up. With NaN seen, n means
  // nothing.
  int64_t* out;
  void* workspace;  // top_k_candidates_workspace_bytes(), zeroed once by the caller; each call leaves its counter zero
  // The draw (null: none): the id core/top_k.h's draw_from_candidates gives from `out`'s candidates with top_p and
  // the splitmix64 `state`, which it advances; 0, the state kept, where they did not fit, a NaN was seen or there
  // were none.
  int64_t* drawn = nullptr;
  uint64_t* state = nullptr;
  double top_p = 1;  // (0, 1]
  // Faults a test asks for (FaultInjection): the candidates said not to fit; random numbers skipped before a draw.
  bool give_up = false;
  int skipped_draws = 0;
};

int64_t top_k_candidates_max_count();
int64_t top_k_candidates_workspace_bytes();

void top_k_candidates(const TopKCandidatesArgs& args, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
