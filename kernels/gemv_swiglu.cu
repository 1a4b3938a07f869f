// The fused SwiGLU projection: the shared GEMV kernel (gemv_kernel.cuh), gated over gate and up, with the input
// RMSNorm folded in where asked.
#include "gemv_kernel.cuh"
#include "gemv_swiglu.cuh"

namespace qvl::cuda {

bool gemv_swiglu_fits(const float* x, const void* gate, const void* up, WeightType w_type, int64_t m, int64_t k,
                      bool normed) {
  return gemv_fits(w_type, m, k, x, gate, up, normed);
}

void gemv_swiglu(const MatmulArgs& gate, const void* up, const GemvNorm& norm, bool overlap, cudaStream_t stream) {
  GemvParts parts;
  parts.part[0] = {gate.w, nullptr, gate.y, gate.n};
  parts.count = 1;
  launch_gemv<GemvEpilogue::SwiGlu>(gate.w_type, gate.x, parts, up, WeightType::F32, gate.m, gate.k, norm, overlap,
                                    stream);
}

}  // namespace qvl::cuda
