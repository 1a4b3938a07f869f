#pragma once
// Greedy decoding's pick on the device (Backend::greedy_pick): the first index of the largest of `count` f32 logits
// and whether any is NaN, into pick[0] and pick[1] (int64 on the device), as core/first_max.h picks on the host.
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

struct GreedyPickArgs {
  const float* logits;
  int64_t count;
  int64_t* pick;
  void* workspace;  // greedy_pick_workspace_bytes(), zeroed once by the caller; every call leaves it zeroed again
};

// The blocks' partial picks and their arrival counter.
int64_t greedy_pick_workspace_bytes();

void greedy_pick(const GreedyPickArgs& args, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
