// The decode projection: the shared GEMV kernel (gemv_kernel.cuh), ungated, with an optional bias, stored or added
// to y.
#include "gemv.cuh"
#include "gemv_kernel.cuh"

namespace qvl::cuda {

bool gemv_fits(const float* x, const void* w, WeightType w_type, int64_t m, int64_t k) {
  return gemv_fits(w_type, m, k, x, w, nullptr);
}

bool gemv(const MatmulArgs& a, bool accumulate, bool overlap, cudaStream_t stream) {
  if (a.m == 0 || a.n == 0) return true;
  if (!gemv_fits(a.w_type, a.m, a.k, a.x, a.w, nullptr)) return false;
  GemvParts parts;
  parts.part[0] = {a.w, a.bias, a.y, a.n};
  parts.count = 1;
  if (accumulate)
    launch_gemv_normed<GemvEpilogue::Accumulate, false>(a.w_type, a.x, parts, nullptr, a.bias_type, a.m, a.k, {},
                                                        overlap, stream);
  else
    launch_gemv_normed<GemvEpilogue::Store, false>(a.w_type, a.x, parts, nullptr, a.bias_type, a.m, a.k, {}, overlap,
                                                   stream);
  return true;
}

}  // namespace qvl::cuda
