// Row-major y = x·wᵀ is column-major yᵀ = w·xᵀ: with w [N, K] row-major read as a column-major K x N matrix,
// cuBLAS computes op(A) = Aᵀ (N x K) times B = xᵀ (K x M), giving yᵀ (N x M) column-major, i.e. y row-major.
#include <cublas_v2.h>

#include <limits>
#include <string>

#include "common.cuh"
#include "convert.cuh"
#include "gemm_cublas.cuh"

// As CUDA_CHECK (common.cuh): where the call failed, the status's name and its meaning.
#define CUBLAS_CHECK(expr)                                                                                  \
  do {                                                                                                      \
    const cublasStatus_t qvl_status_ = (expr);                                                              \
    if (qvl_status_ != CUBLAS_STATUS_SUCCESS) ::qvl::cuda::throw_cublas_error(qvl_status_, #expr, __FILE__, __LINE__); \
  } while (0)

namespace qvl::cuda {

namespace {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                           cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")");
}

}  // namespace

CublasGemm::CublasGemm(cudaStream_t stream) : stream_(stream) {
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  handle_ = h;
  CUBLAS_CHECK(cublasSetStream(h, stream));
}

CublasGemm::~CublasGemm() { cublasDestroy(static_cast<cublasHandle_t>(handle_)); }

namespace {
void check_dimensions(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (m > kMax || n > kMax || k > kMax || m * k > kMax || n * k > kMax)
    throw std::runtime_error("cuBLAS GEMM: a dimension over 2^31");
}
}  // namespace

void CublasGemm::run(const float* x, void* x_narrow, const void* w, WeightType w_type, float* y, int64_t m, int64_t n,
                     int64_t k) {
  if (m == 0 || n == 0) return;
  check_dimensions(m, n, k);
  const float alpha = 1.0f, beta = 0.0f;
  cudaDataType_t type = CUDA_R_32F;
  const void* b = x;
  if (w_type != WeightType::F32) {
    if (x) narrow_f32(x, x_narrow, w_type, m * k, stream_);
    type = w_type == WeightType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    b = x_narrow;
  }
  CUBLAS_CHECK(cublasGemmEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha,
                            w, type, int(k), b, type, int(k), &beta, y, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void CublasGemm::run_batched(const void* const* pointers, int count, WeightType w_type, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0 || count == 0) return;
  check_dimensions(m, n, k);
  if (w_type == WeightType::F32) throw std::runtime_error("cuBLAS batched GEMM: for 16-bit weights");
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t type = w_type == WeightType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  CUBLAS_CHECK(cublasGemmBatchedEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k),
                                   &alpha, pointers, type, int(k), pointers + count, type, int(k), &beta,
                                   const_cast<void* const*>(pointers + 2 * count), CUDA_R_32F, int(n), count,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace qvl::cuda
