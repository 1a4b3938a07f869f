// The host side of common.cuh's launch helpers.
#include "common.cuh"

#include <map>
#include <mutex>
#include <tuple>

namespace qvl::cuda {

bool cluster_fits(const void* kernel, int threads, unsigned cluster, int64_t clusters) {
  if (cluster < 2 || cluster > 8) return false;
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) return false;
  // The answer depends on the kernel's resources and the device's GPCs, not on the call: asked once. (Not a stream
  // operation: also while a stream is being recorded.)
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, unsigned>, int> resident;
  const std::lock_guard lock(mutex);
  const auto key = std::make_tuple(device, kernel, threads, cluster);
  auto found = resident.find(key);
  if (found == resident.end()) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim = {cluster, 1, 1};
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(cluster);
    config.blockDim = dim3(unsigned(threads));
    config.attrs = &attribute;
    config.numAttrs = 1;
    int count = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&count, kernel, &config));
    found = resident.emplace(key, count).first;
  }
  return clusters <= found->second;
}

}  // namespace qvl::cuda
