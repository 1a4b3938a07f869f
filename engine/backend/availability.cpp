#include "backend/availability.h"

#include "backend/cpu_features.h"
#include "backend/cuda_plugin.h"
#include "backend/registry.h"

namespace qvl {

namespace {

// The plugin, the architectures it holds kernels for, and each GPU it sees.
void describe_cuda(std::vector<std::string>& lines) {
  const CudaPluginStatus& cuda = cuda_plugin();
  std::string archs;
  for (const auto& a : cuda.probe["archs"]) archs += (archs.empty() ? "" : ",") + std::to_string(a.get<int>());
  lines.push_back("backend cuda: available (plugin " + cuda.path.string() + ", kernels for sm_" + archs + ")");
  for (const auto& d : cuda.probe["devices"])
    lines.push_back("  gpu " + std::to_string(d.value("index", 0)) + ": " + d.value("name", "?") + ", compute " +
                    std::to_string(d.value("cc", 0) / 10) + "." + std::to_string(d.value("cc", 0) % 10) + ", " +
                    std::to_string(d.value("memory_bytes", uint64_t(0)) >> 20) + " MiB" +
                    (d.value("kernel_ok", false) ? "" : " (unusable: " + d.value("error", std::string("?")) + ")"));
}

}  // namespace

std::vector<std::string> describe_backends() {
  std::vector<std::string> lines;
  for (const BackendInfo& b : backend_registry()) {
    if (!b.available) {
      lines.push_back("backend " + b.id + ": unavailable (" + b.reason + ")");
      continue;
    }
    switch (b.kind) {
      case BackendKind::Cpu: lines.push_back("backend cpu: available (" + cpu_features().describe() + ")"); break;
      case BackendKind::Cuda: describe_cuda(lines); break;
    }
  }
  return lines;
}

}  // namespace qvl
