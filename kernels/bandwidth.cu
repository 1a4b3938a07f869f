// A grid-stride sum over a large buffer with 16-byte loads: the read bandwidth the GEMVs can hope for. The sum is
// written out so the loads cannot be optimised away.
#include "bandwidth.cuh"
#include "common.cuh"

namespace qvl::cuda {
namespace {

__global__ void read_kernel(const float4* data, std::size_t n, float* sink) {
  float acc = 0;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const float4 v = data[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1234.5f) *sink = acc;  // practically never true, but the compiler cannot know
}

}  // namespace

double measure_read_bandwidth(std::size_t bytes, int repeats, int multiprocessors) {
  float4* data = nullptr;
  float* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&data, bytes));
  CUDA_CHECK(cudaMalloc(&sink, sizeof(float)));
  CUDA_CHECK(cudaMemset(data, 0, bytes));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  double best = 0;
  for (int r = 0; r <= repeats; ++r) {
    CUDA_CHECK(cudaEventRecord(start));
    read_kernel<<<unsigned(multiprocessors * 8), 512>>>(data, bytes / sizeof(float4), sink);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0 && ms > 0) best = std::max(best, double(bytes) / (double(ms) * 1e-3));  // r == 0 warms up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(data);
  cudaFree(sink);
  return best;
}

}  // namespace qvl::cuda
