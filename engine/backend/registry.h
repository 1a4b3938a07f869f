#pragma once
// Which backends this build and this machine have, what each can do, and how to make one. The engine, the CLI and
// the GUI ask here instead of comparing backend names; a new backend is a row in registry.cpp (and its factory).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/fusions.h"

namespace qvl {

class Backend;

enum class BackendKind { Cpu, Cuda };

struct BackendInfo {
  BackendKind kind;
  std::string id;     // "cpu", "cuda": option values (--device), settings, JSON
  std::string label;  // "CPU", "GPU (CUDA)": what a person picks
  bool available = false;
  std::string reason;              // why not, when unavailable
  bool has_device_memory = false;  // a memory pool of its own: Backend::memory_report, a capacity limit
  bool records_work = false;       // replays recorded decode steps (CUDA graphs)
  bool has_profiles = false;       // architecture profiles (the CUDA backend's "sm61" and "native")
  // The switches it has a fused kernel for; the others run the unfused reference whether on or off (a comparison of
  // them there compares nothing).
  Fusions fused_kernels = Fusions::none();
};

// Every backend of this build, the CPU first; availability probed once per process.
const std::vector<BackendInfo>& backend_registry();
const BackendInfo& backend_info(BackendKind kind);
// The backend an option value names ("cpu", "cuda"); nullopt for anything else.
std::optional<BackendKind> backend_kind(std::string_view id);
// "cpu or cuda", for error messages.
std::string backend_ids();

struct BackendSettings {
  std::size_t memory_limit = 0;      // bytes the device pool may take (0: what the driver has free, less a reserve)
  std::string cuda_profile = "auto";  // "auto", "sm61" or "native"
};
// Throws qvl::Error naming why when the backend is unavailable or fails to start.
std::unique_ptr<Backend> create_backend(BackendKind kind, const BackendSettings& settings = {});

}  // namespace qvl
