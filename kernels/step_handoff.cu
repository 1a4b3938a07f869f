// A decode step's hand-off: ~2 KB at most (a sampled pick's 260 int64 over the bus to the host, 1 KB of rotary rows
// within the device), one block. What it replaces is what it is for: the two copies the queue held between two
// recorded steps (the position and rotary rows up, the pick down), each a copy-engine operation the next graph waited
// for (~2-8 µs each on the H200, docs/performance.md). Launched the plain way, so it starts after the pick is written.
#include "step_handoff.cuh"

#include "common.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) step_handoff_kernel(StepHandoffArgs a) {
  const int64_t past = *a.past;  // read by every thread before thread 0 writes the next (the barrier below)
  int64_t* slot = a.handed + (past % a.handed_slots) * a.pick_count;
  for (int64_t i = threadIdx.x; i < a.pick_count; i += kThreads) slot[i] = a.pick[i];
  const float* row = a.rotary + ((past + 1) % a.rotary_rows) * 2 * a.head_dim;
  for (int64_t i = threadIdx.x; i < a.head_dim; i += kThreads) {
    a.cos[i] = row[i];
    a.sin[i] = row[a.head_dim + i];
  }
  __syncthreads();
  if (threadIdx.x == 0) *a.past = past + 1;
}

}  // namespace

void step_handoff(const StepHandoffArgs& args, cudaStream_t stream) {
  step_handoff_kernel<<<1, kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
