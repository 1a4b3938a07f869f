// The fused q/k/v projection: the shared GEMV kernel (gemv_kernel.cuh) over three matrices' rows in one launch,
// with the input RMSNorm folded in where asked.
#include "gemv_kernel.cuh"
#include "gemv_qkv.cuh"

namespace qvl::cuda {

bool gemv_qkv_fits(const float* x, const QkvProjection& p, WeightType w_type, int64_t m, int64_t k, bool normed) {
  return gemv_fits(w_type, m, k, x, p.w[0], p.w[1], normed) && gemv_fits(w_type, m, k, x, p.w[2], nullptr, normed);
}

void gemv_qkv(const float* x, const QkvProjection& p, WeightType w_type, WeightType bias_type, int64_t m, int64_t k,
              const GemvNorm& norm, bool overlap, cudaStream_t stream) {
  GemvParts parts;
  for (int i = 0; i < 3; ++i) parts.part[i] = {p.w[i], p.bias[i], p.y[i], p.n[i]};
  parts.count = 3;
  launch_gemv<GemvEpilogue::Store>(w_type, x, parts, nullptr, bias_type, m, k, norm, overlap, stream);
}

}  // namespace qvl::cuda
