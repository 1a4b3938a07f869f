#include "common.cuh"
#include "fault.cuh"

namespace qvl::cuda {
namespace {

__global__ void trap_kernel() { __trap(); }

}  // namespace

void trap(cudaStream_t stream) {
  trap_kernel<<<1, 1, 0, stream>>>();
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
