#pragma once
// Under the sanitizers: Vulkan drivers (ICDs) opened with RTLD_NODELETE before any test makes a device. The loader
// unloads its drivers when an instance goes, and memory lavapipe keeps in its globals then shows as leaked from an
// unknown module (LeakSanitizer cannot see that the driver's data was simply unmapped). Kept loaded, the driver's
// memory stays reachable and only real leaks are reported. A no-op in other builds.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace qvl::test {

inline void keep_vulkan_drivers_loaded() {
#if QVL_SANITIZED_BUILD
  std::vector<std::filesystem::path> manifests;
  for (const char* variable : {"VK_DRIVER_FILES", "VK_ICD_FILENAMES"})
    if (const char* list = std::getenv(variable)) {
      std::stringstream paths(list);
      for (std::string path; std::getline(paths, path, ':');) manifests.emplace_back(path);
    }
  if (manifests.empty())
    for (const char* dir : {"/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"}) {
      std::error_code error;
      for (const auto& entry : std::filesystem::directory_iterator(dir, error)) manifests.push_back(entry.path());
    }
  for (const auto& manifest : manifests) {
    std::ifstream in(manifest);
    const auto json = nlohmann::json::parse(in, nullptr, false);
    if (json.is_discarded() || !json.contains("ICD")) continue;
    const std::string library = json["ICD"].value("library_path", "");
    if (!library.empty()) dlopen(library.c_str(), RTLD_NOW | RTLD_NODELETE);
  }
#endif
}

}  // namespace qvl::test
