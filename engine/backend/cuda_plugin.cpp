#include "backend/cuda_plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "plugin_abi.h"  // kernels/: the C interface only, no CUDA
#include "backend/backend.h"
#include "core/error.h"
#include "core/paths.h"

namespace qvl {
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> candidate_paths() {
  std::vector<fs::path> paths;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    paths.push_back(exe.parent_path().parent_path() / "lib" / "qvl" / "libqvl-cuda.so");  // installed
    paths.push_back(exe.parent_path().parent_path() / "lib" / "libqvl-cuda.so");          // build tree (app/, tests/)
    paths.push_back(exe.parent_path() / "libqvl-cuda.so");
  }
  return paths;
}

CudaPluginStatus load() {
  CudaPluginStatus status;
  std::vector<fs::path> paths;
  if (const char* env = std::getenv("QVL_CUDA_PLUGIN")) {
    if (!*env) {
      status.reason = "CUDA disabled (QVL_CUDA_PLUGIN is empty)";
      return status;
    }
    paths.push_back(env);
  } else {
    paths = candidate_paths();
  }
  void* handle = nullptr;
  std::string last_error;
  for (const auto& p : paths) {
    if (!fs::exists(p)) continue;
    handle = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      status.path = p;
      break;
    }
    last_error = ::dlerror();
  }
  if (!handle) {
    status.reason = last_error.empty() ? "the CUDA plugin (libqvl-cuda.so) is not installed"
                                       : "the CUDA plugin could not be loaded: " + last_error;
    return status;
  }
  // The handle is kept for the life of the process: the plugin's code may run until exit.
  auto abi = reinterpret_cast<int (*)()>(::dlsym(handle, "qvl_cuda_plugin_abi"));
  auto probe = reinterpret_cast<size_t (*)(char*, size_t)>(::dlsym(handle, "qvl_cuda_probe"));
  if (!abi || !probe || abi() != QVL_CUDA_PLUGIN_ABI) {
    status.reason = status.path.string() + " is not a compatible qvl CUDA plugin (ABI " + std::to_string(abi ? abi() : -1) +
                    ", expected " + std::to_string(QVL_CUDA_PLUGIN_ABI) + ")";
    return status;
  }
  status.create = reinterpret_cast<decltype(status.create)>(::dlsym(handle, "qvl_cuda_create_backend"));
  std::string text(probe(nullptr, 0) + 1, '\0');
  probe(text.data(), text.size());
  text.pop_back();
  status.probe = nlohmann::json::parse(text, nullptr, false);
  if (status.probe.is_discarded()) {
    status.reason = "the CUDA plugin's probe returned malformed JSON";
  } else if (!status.probe.value("error", nlohmann::json()).is_null()) {
    status.reason = status.probe["error"].get<std::string>();
  } else {
    status.usable = true;
  }
  return status;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, std::size_t capacity, const std::string& profile) {
  const CudaPluginStatus& plugin = cuda_plugin();
  if (!plugin.usable || !plugin.create) fail("CUDA is not available: ", plugin.reason);
  std::string chosen = profile;
  if (const char* env = std::getenv("QVL_CUDA_PROFILE"); env && *env && profile == "auto") chosen = env;
  if (chosen != "auto" && chosen != "sm61" && chosen != "native")
    fail("CUDA profile must be auto, sm61 or native (got '", chosen, "')");
  char error[1024] = "";
  void* backend = plugin.create(device, capacity, chosen.c_str(), error, sizeof error);
  if (!backend) fail("the CUDA backend could not start: ", error);
  return std::unique_ptr<Backend>(static_cast<Backend*>(backend));
}

const CudaPluginStatus& cuda_plugin() {
  static const CudaPluginStatus status = load();
  return status;
}

std::optional<std::array<uint8_t, 16>> cuda_device_uuid(int device) {
  const CudaPluginStatus& status = cuda_plugin();
  if (!status.usable) return std::nullopt;
  for (const auto& d : status.probe.value("devices", nlohmann::json::array())) {
    if (d.value("index", -1) != device || !d.contains("uuid") || !d["uuid"].is_string()) continue;
    const std::string hex = d["uuid"].get<std::string>();
    if (hex.size() != 32) return std::nullopt;
    std::array<uint8_t, 16> uuid{};
    for (size_t i = 0; i < 16; ++i) uuid[i] = static_cast<uint8_t>(std::strtoul(hex.substr(2 * i, 2).c_str(), nullptr, 16));
    return uuid;
  }
  return std::nullopt;
}

}  // namespace qvl
