#pragma once
// An empty kernel launched the plain way: whatever follows it in the stream starts after everything before it has
// finished. A recorded decode step ends with it (or with its hand-off, step_handoff.cuh, launched the same way), so
// that the graph counts as done only when its last overlapped kernel is (common.cuh: with programmatic dependent
// launch, the copy of the logits after the graph read them before the last kernel had written them).
#include <cuda_runtime.h>

namespace qvl::cuda {

void barrier(cudaStream_t stream);

}  // namespace qvl::cuda
