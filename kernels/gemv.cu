// The decode projection: the shared GEMV kernel (gemv_kernel.cuh), ungated, with an optional bias, stored or added
// to y.
#include "gemv.cuh"
#include "gemv_kernel.cuh"

namespace qvl::cuda {

bool gemv_fits(const float* x, const void* w, WeightType w_type, int64_t m, int64_t k) {
  return gemv_fits(w_type, m, k, x, w, nullptr);
}

bool gemv(const float* x, const void* w, WeightType w_type, const void* bias, WeightType bias_type, float* y, int64_t m,
          int64_t n, int64_t k, bool accumulate, bool overlap, cudaStream_t stream) {
  if (m == 0 || n == 0) return true;
  if (!gemv_fits(w_type, m, k, x, w, nullptr)) return false;
  GemvParts parts;
  parts.part[0] = {w, bias, y, n};
  parts.count = 1;
  if (accumulate)
    launch_gemv_normed<GemvEpilogue::Accumulate, false>(w_type, x, parts, nullptr, bias_type, m, k, {}, overlap,
                                                        stream);
  else launch_gemv_normed<GemvEpilogue::Store, false>(w_type, x, parts, nullptr, bias_type, m, k, {}, overlap, stream);
  return true;
}

}  // namespace qvl::cuda
