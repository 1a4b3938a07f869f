#include "backend/registry.h"

#include "backend/backend.h"
#include "backend/cuda_plugin.h"
#include "core/error.h"

namespace qvl {

namespace {
// The CPU fuses the residual add into the RMSNorm after it, runs q+k+v as one loop over their rows and gate/up with
// SiLU ⊙ up in each chunk of rows (cpu_backend.cpp, cpu_products.h), and picks from the output head's bounds copy
// (cpu/head_bounds.h); the rest it runs as the reference.
Fusions cpu_fused_kernels() {
  Fusions f = Fusions::none();
  f.add_rms_norm = true;
  f.qkv_projection = true;
  f.swiglu_projection = true;
  f.bounded_head_pick = true;
  return f;
}
}  // namespace

const std::vector<BackendInfo>& backend_registry() {
  static const std::vector<BackendInfo> registry = [] {
    const CudaPluginStatus& cuda = cuda_plugin();
    return std::vector<BackendInfo>{
        {BackendKind::Cpu, "cpu", "CPU", true, "", false, false, false, cpu_fused_kernels()},
        {BackendKind::Cuda, "cuda", "GPU (CUDA)", cuda.usable, cuda.reason, true, true, true, Fusions{}},
    };
  }();
  return registry;
}

const BackendInfo& backend_info(BackendKind kind) {
  for (const BackendInfo& b : backend_registry())
    if (b.kind == kind) return b;
  fail("no backend of kind ", int(kind), " in this build");
}

std::optional<BackendKind> backend_kind(std::string_view id) {
  for (const BackendInfo& b : backend_registry())
    if (b.id == id) return b.kind;
  return std::nullopt;
}

std::string backend_ids() {
  std::string ids;
  const auto& all = backend_registry();
  for (std::size_t i = 0; i < all.size(); ++i) ids += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i].id;
  return ids;
}

std::unique_ptr<Backend> create_backend(BackendKind kind, const BackendSettings& settings) {
  const BackendInfo& info = backend_info(kind);
  if (!info.available) fail(info.label, " is not available (", info.reason, ")");
  switch (kind) {
    case BackendKind::Cpu: return make_cpu_backend();
    case BackendKind::Cuda: return make_cuda_backend(0, settings.memory_limit, settings.cuda_profile);
  }
  fail("no factory for backend ", info.id);
}

}  // namespace qvl
