#pragma once
// Finds and loads libqvl-cuda at run time. The core never links CUDA: when the plugin, the driver or a usable GPU
// is missing, `reason` says which, and the engine runs on the CPU.
#include <array>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace qvl {

struct CudaPluginStatus {
  bool usable = false;             // ... and at least one GPU can run its kernels
  std::filesystem::path path;      // where it was loaded from
  nlohmann::json probe;            // the plugin's own report (devices, driver, archs)
  std::string reason;              // why CUDA cannot be used, empty when usable
  // Creates the backend on a device (capacity 0: the free memory less a reserve); throws qvl::Error with the plugin's message.
  void* (*create)(int device, size_t capacity, const char* profile, char* error, size_t error_capacity) = nullptr;
};

class Backend;
// profile: "auto" follows the GPU (compute capability below 7.0 gets "sm61"); "sm61" forces the Pascal path on
// any GPU (f16 weight storage, f32 arithmetic) so it is tested on modern cards; $QVL_CUDA_PROFILE overrides "auto".
std::unique_ptr<Backend> make_cuda_backend(int device = 0, std::size_t capacity = 0, const std::string& profile = "auto");

// The UUID of CUDA device `device` from the plugin's probe (what a Vulkan device is matched by), or nullopt when
// CUDA is unusable or the device has none.
std::optional<std::array<uint8_t, 16>> cuda_device_uuid(int device = 0);

// Loads once per process; $QVL_CUDA_PLUGIN overrides the search (an empty value disables CUDA, for tests).
const CudaPluginStatus& cuda_plugin();

}  // namespace qvl
