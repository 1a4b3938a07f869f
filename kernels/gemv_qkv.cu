// The fused q/k/v projection: the shared GEMV kernel (gemv_kernel.cuh) over three matrices' rows in one launch.
#include "gemv_kernel.cuh"
#include "gemv_qkv.cuh"

namespace qvl::cuda {

bool gemv_qkv_fits(const float* x, const QkvProjection& p, WeightType w_type, int64_t m, int64_t k) {
  return gemv_fits(w_type, m, k, x, p.w[0], p.w[1]) && gemv_fits(w_type, m, k, x, p.w[2], nullptr);
}

void gemv_qkv(const float* x, const QkvProjection& p, WeightType w_type, WeightType bias_type, int64_t m, int64_t k,
              cudaStream_t stream) {
  GemvParts parts;
  for (int i = 0; i < 3; ++i) parts.part[i] = {p.w[i], p.bias[i], p.y[i], p.n[i]};
  parts.count = 3;
  launch_gemv<false>(w_type, x, parts, nullptr, bias_type, m, k, stream);
}

}  // namespace qvl::cuda
