#include "backend/cpu_features.h"

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace qvl {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know it. Its registers are the
    // AVX ones, whose OS support the avx2 test above includes.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    f.f16c = f.avx2 && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    // AVX-512 VNNI from CPUID leaf 7 (ECX bit 11), as F16C above; the avx512f test includes the OS's support.
    f.avx512vnni = f.avx512f && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ecx & bit_AVX512VNNI) != 0;
#endif
    f.cores = int(std::max(1u, std::thread::hardware_concurrency()));
    return f;
  }();
  return features;
}

std::string CpuFeatures::describe() const {
  std::string s = std::to_string(cores) + (cores == 1 ? " core" : " cores");
  const std::pair<bool, const char*> flags[] = {{avx2, "AVX2"}, {fma, "FMA"}, {f16c, "F16C"}, {avx512f, "AVX-512F"}, {avx512bw, "AVX-512BW"}, {avx512vl, "AVX-512VL"}, {avx512vnni, "AVX-512 VNNI"}};
  std::string list;
  for (const auto& [on, name] : flags)
    if (on) list += std::string(list.empty() ? "" : " ") + name;
  return s + ", " + (list.empty() ? "baseline x86-64 (no AVX2)" : list);
}

}  // namespace qvl
