// The host side of common.cuh's launch helpers.
#include "common.cuh"

#include <map>
#include <mutex>
#include <tuple>

namespace qvl::cuda {

bool cluster_fits(const void* kernel, int threads, unsigned cluster, int64_t clusters) {
  if (cluster < 2 || cluster > 8) return false;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  // The answer depends on the kernel's code and resources and on the device's GPCs, not on the call: asked once.
  // (Not a stream operation: also while a stream is being recorded.)
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, unsigned>, int> resident;
  const std::lock_guard lock(mutex);
  const auto key = std::make_tuple(device, kernel, threads, cluster);
  auto found = resident.find(key);
  if (found == resident.end()) {
    int count = 0;
    // The code that runs must be SM90's: a build without an sm_90 target still runs on an H100 from older PTX,
    // whose kernels were compiled without clusters (merge_in_cluster traps there).
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major >= 9 && attributes.ptxVersion >= 90) {
      cudaLaunchAttribute attribute{};
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim = {cluster, 1, 1};
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(cluster);
      config.blockDim = dim3(unsigned(threads));
      config.attrs = &attribute;
      config.numAttrs = 1;
      CUDA_CHECK(cudaOccupancyMaxActiveClusters(&count, kernel, &config));
    }
    found = resident.emplace(key, count).first;
  }
  return clusters <= found->second;
}

}  // namespace qvl::cuda
