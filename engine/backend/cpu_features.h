#pragma once
#include <string>

namespace qvl {

// What this processor can run, read at run time: release builds target plain x86-64 and pick wider kernels here.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false;
  int cores = 1;
  std::string describe() const;  // "8 cores, AVX2 FMA F16C"
};

const CpuFeatures& cpu_features();

}  // namespace qvl
