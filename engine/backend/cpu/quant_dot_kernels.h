#pragma once
// The inner loop of a CPU linear layer with q8 or q4 weights: one weight row against activation rows quantised per
// block of 32 (backend/quantize.h), in integer arithmetic: each block's 32 products summed exactly in int32, then
// scaled by the weight's and the activation's scales in f32. A decode reads 1.06 (q8) or 0.56 (q4) bytes a weight
// instead of bf16's 2, and the integer dot of a block is a few instructions (AVX2: maddubs + madd). q4 keeps its
// stored offset (w + 8, unsigned, straight into maddubs; the 8·Σx it adds taken off in int32), and the one-row loop
// widens eight blocks' scales at once and takes q4 two blocks a vector. AVX-512 VNNI (vpdpbusd) takes two q8 blocks
// or four q4 blocks a vector where the processor has it. One variant per instruction set, chosen with the dot kernels.
#include <cstddef>
#include <cstdint>

namespace qvl::cpu {

struct QuantDot {
  const int8_t* x = nullptr;        // rows x blocks·32 quantised activations
  const float* x_scales = nullptr;  // rows x blocks
  const int32_t* x_sums = nullptr;  // rows x blocks: each block's sum of its values; q4 needs them (quantize_activation_row)
  std::size_t rows = 0, blocks = 0;
  const uint8_t* w = nullptr;         // one weight row's values, packed as the format says (quantize.h)
  const uint16_t* w_scales = nullptr;  // its f16 scales, one per group
  int group_shift = 0;  // block b's scale is w_scales[b >> group_shift]
  float* y = nullptr;  // y[m * y_stride] for m < rows
  std::size_t y_stride = 1;
};

struct QuantDotKernels {
  void (*q8)(const QuantDot&);
  void (*q4)(const QuantDot&);
  // An activation row quantised per block (quantize_activation_row's contract and its bits: the same products and
  // rounding, vectorised; it ran serially before every product, 13 µs a 2,048-wide row on the 2-core machine).
  void (*quantize_row)(const float* x, int64_t k, int8_t* q, float* scales, int32_t* sums);
  const char* name;
};

// The variant of the same instruction set as dot_kernels() ($QVL_CPU_KERNELS applies to both).
const QuantDotKernels& quant_dot_kernels();
const QuantDotKernels& quant_dot_kernels_generic();
const QuantDotKernels* quant_dot_kernels_avx2();  // nullptr when the processor lacks AVX2/FMA
const QuantDotKernels* quant_dot_kernels_avx512_vnni();  // nullptr without AVX-512 F/BW/VL and VNNI

}  // namespace qvl::cpu
