#pragma once
// Quantisation on the host: a float matrix to q8 or q4 (weights, once at load or by `qvl quantize`), back to the
// floats it stands for (the reference transformers runs, and the CPU embedding), and the per-block quantisation of
// activations that every backend's integer products share (so CPU and GPU sums differ only in their order).
//
// Weights, per group of `group` values along a row (format_traits: padded with zeros to whole groups):
//   q8: scale = f16(max|x| / 127), q = round(x · (1 / scale)) in [-127, 127]
//   q4: scale = f16(m / -8) where m is the value of largest magnitude, q = round(x · (1 / scale)) in [-8, 7], stored
//       q + 8
//       (the largest value maps to -8 exactly: the whole 4-bit range is used, as llama.cpp's Q4_0 does)
// Activations, per block of kQuantBlock values: scale = max|x| / 127 (f32), q = round(x · (127 / max|x|)).
// Rounding is to nearest, ties to even, in f32, everywhere.
#include <cstdint>
#include <string_view>

#include "backend/weight_format.h"

namespace qvl {

// The q8/q4 form of a host matrix [out, in] (f32, f16 or bf16). Throws qvl::Error naming `name` and the place for
// a NaN or infinite value, or a group whose scale does not fit an f16. The same input gives the same bits.
LinearWeights quantize_matrix(const Tensor& matrix, WeightFormat format, int64_t group, std::string_view name);

// The floats a quantised matrix stands for: [out, in] in `type` (f32 or bf16; bf16 holds q8 and q4 values times an
// f16 scale to within its rounding), on the host.
Tensor dequantize_matrix(const LinearWeights& w, DType type = DType::F32);
// Row r of a quantised matrix (host) as in floats.
void dequantize_row(const LinearWeights& w, int64_t r, float* out);

// Activations quantised per block of kQuantBlock values (the operand of the integer products).
int64_t activation_blocks(int64_t k);  // blocks for k values (the last one padded with zeros)
// x[k] -> q[activation_blocks(k) * kQuantBlock] (zeros past k) and scales[activation_blocks(k)].
// sums (optional): each block's sum of its quantised values (q4's kept offset: Σ (w + 8)·x − 8·Σx = Σ w·x).
void quantize_activation_row(const float* x, int64_t k, int8_t* q, float* scales, int32_t* sums = nullptr);

}  // namespace qvl
