// Entry points of libqvl-cuda that the core finds with dlsym.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <string>

#include "common.cuh"
#include "plugin_abi.h"

namespace {

// A kernel that does nothing: launching it proves the fat binary holds code this GPU can run.
__global__ void probe_kernel(int* flag) {
  if (flag) *flag = 1;
}

nlohmann::json probe() {
  nlohmann::json result = {{"driver", 0}, {"runtime", 0}, {"archs", nlohmann::json::array()},
                           {"devices", nlohmann::json::array()}, {"error", nullptr}};
#ifdef __CUDA_ARCH_LIST__  // nvcc >= 11.5: the architectures this file was compiled for, e.g. 610,750,900
  for (int a : {__CUDA_ARCH_LIST__}) result["archs"].push_back(a / 10);
#endif
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  result["driver"] = driver;
  result["runtime"] = runtime;
  if (driver == 0) {
    result["error"] = "no NVIDIA driver is installed";
    return result;
  }
  // Without the kernel module no GPU can be used, whatever the user-space library says: the library's version (found
  // in a container or left by an uninstall) once sent a user to update a driver for a machine with no GPU.
  // (WSL2 reaches the Windows driver through /dev/dxg, with no /proc/driver/nvidia.)
  const bool module_loaded = access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
  const std::string no_module = "no NVIDIA GPU driver is loaded (/proc/driver/nvidia is missing: no NVIDIA GPU, or its "
                                "driver is not installed)";
  if (driver < runtime) {
    const std::string versions = "CUDA " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
                                 ", the plugin needs " + std::to_string(runtime / 1000) + "." +
                                 std::to_string(runtime % 1000 / 10);
    result["error"] = module_loaded ? "the NVIDIA driver supports " + versions + ": update the driver"
                                    : no_module + "; the CUDA library found here supports " + versions;
    return result;
  }
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    result["error"] = (module_loaded ? std::string() : no_module + "; ") + "CUDA initialisation failed: " +
                      cudaGetErrorString(e);
    return result;
  }
  if (count == 0) {
    result["error"] = "no CUDA device";
    return result;
  }
  bool any_usable = false;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    nlohmann::json d = {{"index", i}, {"kernel_ok", false}, {"error", nullptr}};
    if (const cudaError_t e = cudaGetDeviceProperties(&p, i); e != cudaSuccess) {
      d["error"] = cudaGetErrorString(e);
      result["devices"].push_back(d);
      continue;
    }
    d["name"] = p.name;
    d["cc"] = p.major * 10 + p.minor;
    d["memory_bytes"] = p.totalGlobalMem;
    d["multiprocessors"] = p.multiProcessorCount;
    // The UUID a Vulkan device is matched by (interop), as 32 hex digits.
    char uuid[33];
    for (int b = 0; b < 16; ++b) std::snprintf(uuid + 2 * b, 3, "%02x", static_cast<unsigned char>(p.uuid.bytes[b]));
    d["uuid"] = uuid;
    cudaSetDevice(i);
    probe_kernel<<<1, 1>>>(nullptr);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) {
      d["kernel_ok"] = true;
      any_usable = true;
    } else {
      d["error"] = e == cudaErrorNoKernelImageForDevice
                       ? "no kernel image for compute capability " + std::to_string(p.major * 10 + p.minor) +
                             " in this build"
                       : std::string(cudaGetErrorString(e));
    }
    result["devices"].push_back(d);
  }
  if (!any_usable) result["error"] = "no usable CUDA device: " + result["devices"][0]["error"].get<std::string>();
  return result;
}

}  // namespace

extern "C" int qvl_cuda_plugin_abi(void) { return QVL_CUDA_PLUGIN_ABI; }

extern "C" size_t qvl_cuda_probe(char* out, size_t capacity) {
  std::string text;
  try {
    text = probe().dump();
  } catch (const std::exception& e) {
    text = nlohmann::json{{"error", std::string("probe failed: ") + e.what()}}.dump();
  }
  if (out && capacity) {
    const size_t n = text.size() < capacity - 1 ? text.size() : capacity - 1;
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  }
  return text.size();
}
