#pragma once
// The inner loop of every CPU linear layer: dot products of f32 activations with one weight row stored as f32,
// f16 or bf16. Weights stay in their stored type (a bf16 2B model is 4.3 GB in memory, not 8.5) and are widened
// in registers. Variants for AVX-512, AVX2+FMA+F16C and plain C++ are chosen once, at run time.
#include <cstddef>
#include <string_view>

#include "core/dtype.h"

namespace qvl::cpu {

// y[m * y_stride + j] = dot(x + m * k, w + j * w_stride) for m < rows and j < w_rows <= kDotTileRows (w_stride in
// bytes). The SIMD kernels hold a tile of kDotTileRows weight rows x 3-4 activation rows in registers, so each weight
// vector loaded serves several activation rows and each activation vector several weight rows. (One weight row at a
// time against four activation rows took 5 loads for 4 FMAs into four dependent chains, bound by the loads and the
// FMA latency: docs/performance.md.) Reading the weights once for many activation rows is what makes prefill
// cheaper per token than decode.
constexpr std::size_t kDotTileRows = 4;
using DotTileFn = void (*)(const float* x, std::size_t rows, std::size_t k, const void* w, std::size_t w_stride,
                           std::size_t w_rows, DType w_type, float* y, std::size_t y_stride);

struct DotKernels {
  DotTileFn dot_tile;
  const char* name;  // "avx512", "avx2", "generic"
};

// The best variant this processor runs ($QVL_CPU_KERNELS=generic|avx2|avx512 forces one, for tests).
const DotKernels& dot_kernels();
const DotKernels& dot_kernels_generic();
const DotKernels* dot_kernels_avx2();    // nullptr when the processor lacks AVX2/FMA/F16C
const DotKernels* dot_kernels_avx512();  // nullptr when the processor lacks AVX-512F

// For the other kernel tables (attention, activations), which follow the instruction set chosen here.
template <typename Table>
const Table& same_isa_as_dot_kernels(const Table& generic, const Table& avx2, const Table& avx512) {
  const std::string_view isa = dot_kernels().name;
  return isa == "avx512" ? avx512 : isa == "avx2" ? avx2 : generic;
}

}  // namespace qvl::cpu
