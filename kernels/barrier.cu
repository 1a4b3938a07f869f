#include "barrier.cuh"
#include "common.cuh"

namespace qvl::cuda {
namespace {

__global__ void barrier_kernel() {}

}  // namespace

void barrier(cudaStream_t stream) {
  barrier_kernel<<<1, 1, 0, stream>>>();
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
