#pragma once
// Sampling's top-p and draw on the device (Backend::draw_from_candidates), over what top_k_candidates.cu found: the
// id core/top_k.h's draw_from_candidates gives, so a decode step queued after this one can embed the token the
// host's sampler is about to draw (TextDecoder::queue_step) instead of waiting for the host.
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

struct DrawFromCandidatesArgs {
  const int64_t* candidates;  // TopKCandidatesArgs::out's layout
  double top_p;               // (0, 1]
  uint64_t* state;            // the sampler's splitmix64 state: advanced by one draw where there is a candidate
  int64_t* drawn;             // the id; 0 (the state kept) where the candidates did not fit, or a NaN was seen
};

void draw_from_candidates(const DrawFromCandidatesArgs& args, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
