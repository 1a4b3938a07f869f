#include "backend/availability.h"

#include "backend/cpu_features.h"
#include "backend/cuda_plugin.h"

namespace qvl {

std::vector<std::string> describe_backends() {
  std::vector<std::string> lines;
  lines.push_back("backend cpu: available (" + cpu_features().describe() + ")");
  const CudaPluginStatus& cuda = cuda_plugin();
  if (!cuda.usable) {
    lines.push_back("backend cuda: unavailable (" + cuda.reason + ")");
    return lines;
  }
  std::string archs;
  for (const auto& a : cuda.probe["archs"]) archs += (archs.empty() ? "" : ",") + std::to_string(a.get<int>());
  lines.push_back("backend cuda: available (plugin " + cuda.path.string() + ", kernels for sm_" + archs + ")");
  for (const auto& d : cuda.probe["devices"])
    lines.push_back("  gpu " + std::to_string(d.value("index", 0)) + ": " + d.value("name", "?") + ", compute " +
                    std::to_string(d.value("cc", 0) / 10) + "." + std::to_string(d.value("cc", 0) % 10) + ", " +
                    std::to_string(d.value("memory_bytes", uint64_t(0)) >> 20) + " MiB" +
                    (d.value("kernel_ok", false) ? "" : " (unusable: " + d.value("error", std::string("?")) + ")"));
  return lines;
}

}  // namespace qvl
