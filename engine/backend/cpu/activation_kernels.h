#pragma once
// The CPU activations with a transcendental per element: GELU (tanh form, the vision MLP) and SiLU(gate) * up (the
// text MLP). A libm tanh per element took 987 ms of an 11.8 s vision encode (2B shapes, 448x448,
// 2 cores); the SIMD variants use the sigmoid forms x * sigmoid(z) with a vector exp (31 ms). Chosen with the dot kernels.
#include <cstddef>

namespace qvl::cpu {

struct ActivationKernels {
  // y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (= x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)))
  void (*gelu_tanh)(const float* x, float* y, std::size_t n);
  // y = gate * sigmoid(gate) * up
  void (*silu_mul)(const float* gate, const float* up, float* y, std::size_t n);
  const char* name;
};

const ActivationKernels& activation_kernels();  // the instruction set of dot_kernels()
const ActivationKernels& activation_kernels_generic();
const ActivationKernels* activation_kernels_avx2();
const ActivationKernels* activation_kernels_avx512();

}  // namespace qvl::cpu
