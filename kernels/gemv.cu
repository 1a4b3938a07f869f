// The decode projection: the shared GEMV kernel (gemv_kernel.cuh), ungated, with an optional bias.
#include "gemv.cuh"
#include "gemv_kernel.cuh"

namespace qvl::cuda {

bool gemv(const float* x, const void* w, WeightType w_type, const void* bias, WeightType bias_type, float* y, int64_t m,
          int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return true;
  if (!gemv_fits(w_type, m, k, x, w, nullptr)) return false;
  GemvParts parts;
  parts.part[0] = {w, bias, y, n};
  parts.count = 1;
  launch_gemv<false>(w_type, x, parts, nullptr, bias_type, m, k, stream);
  return true;
}

}  // namespace qvl::cuda
