// The decode projection: the shared GEMV kernel (gemv_kernel.cuh), ungated, with an optional bias.
#include "gemv.cuh"
#include "gemv_kernel.cuh"

namespace qvl::cuda {

bool gemv(const float* x, const void* w, WeightType w_type, const void* bias, WeightType bias_type, float* y, int64_t m,
          int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return true;
  if (!gemv_fits(w_type, m, k, x, w, nullptr)) return false;
  launch_gemv<false>(w_type, x, w, nullptr, bias, bias_type, y, m, n, k, stream);
  return true;
}

}  // namespace qvl::cuda
