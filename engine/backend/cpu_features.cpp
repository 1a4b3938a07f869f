#include "backend/cpu_features.h"

#include <thread>

namespace qvl {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
#endif
    f.cores = int(std::max(1u, std::thread::hardware_concurrency()));
    return f;
  }();
  return features;
}

std::string CpuFeatures::describe() const {
  std::string s = std::to_string(cores) + (cores == 1 ? " core" : " cores");
  const std::pair<bool, const char*> flags[] = {{avx2, "AVX2"}, {fma, "FMA"}, {f16c, "F16C"}, {avx512f, "AVX-512F"}, {avx512bw, "AVX-512BW"}};
  std::string list;
  for (const auto& [on, name] : flags)
    if (on) list += std::string(list.empty() ? "" : " ") + name;
  return s + ", " + (list.empty() ? "baseline x86-64 (no AVX2)" : list);
}

}  // namespace qvl
