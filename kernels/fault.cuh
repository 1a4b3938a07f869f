#pragma once
// A kernel that faults on purpose (a device-side trap): the tests of the "kernel fault during generation" path use
// it, through QVL_CUDA_FAULT_AT_LINEAR, to check that the request fails with a clear error and the engine stays usable.
#include <cuda_runtime.h>

namespace qvl::cuda {

void trap(cudaStream_t stream);

}  // namespace qvl::cuda
