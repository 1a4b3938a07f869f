// Microbenchmark, not part of the product (docs/performance.md has its results): what queueing GPU work costs the
// host, and what cuBLAS's algorithm choice costs the GPU, for the 2B's prefill and vision products.
//  1. an empty kernel's launch, cudaEventRecord, cublasGemmEx (host µs a call, 2,000 / 500 calls);
//  2. per shape (m rows x n outputs x k inputs, bf16 in, f32 out): cublasGemmEx against cublasLtMatmul with its
//     descriptors made once, each of the heuristic's first 8 algorithms timed with events (50 calls) and the
//     fastest kept; host µs a call for both. Where the host µs equal the GPU µs the loop was bound by the host,
//     and the GPU figure is only a bound.
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 tools/microbench/cublas_host_cost.cu -lcublasLt -lcublas -o /tmp/chc && /tmp/chc
#include <chrono>
#include <cstdio>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#define CK(x) do { auto s_ = (x); if (int(s_) != 0) { std::printf("fail %s: %d\n", #x, int(s_)); return 1; } } while (0)

__global__ void empty_kernel(float* p) { if (p && threadIdx.x == 9999) p[0] = 1; }

int launch_costs() {
  cudaStream_t s; cudaStreamCreate(&s);
  float* d; cudaMalloc(&d, 64 << 20);
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
  for (int w = 0; w < 2; ++w) {
    auto t0 = now();
    for (int i = 0; i < 2000; ++i) empty_kernel<<<132, 256, 0, s>>>(d);
    auto t1 = now(); cudaStreamSynchronize(s); auto t2 = now();
    std::printf("empty kernel: %.2f us a launch (host), %.2f us a kernel (all)\n", us(t0, t1) / 2000, us(t0, t2) / 2000);
  }
  cudaEvent_t e; cudaEventCreate(&e);
  { auto t0 = now(); for (int i = 0; i < 2000; ++i) cudaEventRecord(e, s); auto t1 = now(); cudaStreamSynchronize(s);
    std::printf("cudaEventRecord: %.2f us\n", us(t0, t1) / 2000); }
  cublasHandle_t h; cublasCreate(&h); cublasSetStream(h, s);
  const float alpha = 1, beta = 0;
  for (int m : {8, 256}) {
    for (int w = 0; w < 2; ++w) {
      auto t0 = now();
      for (int i = 0; i < 500; ++i)
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2048, m, 2048, &alpha, d, CUDA_R_16BF, 2048, d + (8 << 20), CUDA_R_16BF, 2048, &beta,
                     d + (12 << 20), CUDA_R_32F, 2048, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      auto t1 = now(); cudaStreamSynchronize(s); auto t2 = now();
      std::printf("cublasGemmEx 2048x2048 m=%d: %.2f us a call (host), %.2f us (all)\n", m, us(t0, t1) / 500, us(t0, t2) / 500);
    }
  }
    return 0;
}

int algorithm_costs() {
  cudaStream_t s; cudaStreamCreate(&s);
  char* d; cudaMalloc(&d, 1 << 30);
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
  cublasHandle_t h; cublasCreate(&h); cublasSetStream(h, s);
  cublasLtHandle_t lt; cublasLtCreate(&lt);
  void* ws; size_t ws_bytes = 32 << 20; cudaMalloc(&ws, ws_bytes);
  cublasSetWorkspace(h, ws, ws_bytes);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  const float alpha = 1, beta = 0;
  struct Shape { int n, k; };
  for (int m : {9, 237, 512, 784}) for (Shape sh : {Shape{2048, 2048}, Shape{1024, 2048}, Shape{6144, 2048}, Shape{2048, 6144}, Shape{1024, 1024}, Shape{4096, 1024}, Shape{1024, 4096}}) {
    const int n = sh.n, k = sh.k;
    void *W = d, *X = d + (256 << 20), *Y = d + (512 << 20);
    // GemmEx: host per call, GPU per call
    for (int i = 0; i < 20; ++i) cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, W, CUDA_R_16BF, k, X, CUDA_R_16BF, k, &beta, Y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaStreamSynchronize(s);
    auto t0 = now(); cudaEventRecord(e0, s);
    for (int i = 0; i < 200; ++i) cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, W, CUDA_R_16BF, k, X, CUDA_R_16BF, k, &beta, Y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    auto t1 = now(); cudaEventRecord(e1, s); cudaEventSynchronize(e1); float gms; cudaEventElapsedTime(&gms, e0, e1);
    const double ex_host = us(t0, t1) / 200, ex_gpu = gms * 1000 / 200;
    // Lt: descriptors once, the heuristic's top algorithms each timed, the best kept
    cublasLtMatmulDesc_t op; CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, n, k);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, m, k);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, n);
    cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t res[8]; int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, res, &found));
    double best = 1e9, first_gpu = 0; int best_i = 0;
    for (int a = 0; a < found; ++a) {
      for (int i = 0; i < 5; ++i) cublasLtMatmul(lt, op, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, &res[a].algo, ws, ws_bytes, s);
      cudaEventRecord(e0, s);
      for (int i = 0; i < 50; ++i) cublasLtMatmul(lt, op, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, &res[a].algo, ws, ws_bytes, s);
      cudaEventRecord(e1, s); cudaEventSynchronize(e1); cudaEventElapsedTime(&gms, e0, e1);
      const double g = gms * 1000 / 50; if (a == 0) first_gpu = g;
      if (g < best) best = g, best_i = a;
    }
    cudaStreamSynchronize(s);
    t0 = now();
    for (int i = 0; i < 200; ++i) cublasLtMatmul(lt, op, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, &res[best_i].algo, ws, ws_bytes, s);
    t1 = now(); cudaStreamSynchronize(s);
    const double lt_host = us(t0, t1) / 200;
    const double flop = 2.0 * m * n * k;
    std::printf("m=%4d %5dx%-5d GemmEx host %5.2f us gpu %6.2f us (%5.0f TF) | Lt host %5.2f us, heuristic#0 %6.2f us, best #%d of %d %6.2f us (%5.0f TF)\n",
                m, n, k, ex_host, ex_gpu, flop / ex_gpu / 1e6, lt_host, first_gpu, best_i, found, best, flop / best / 1e6);
    cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(op);
  }
    return 0;
}

int main() { return launch_costs() || algorithm_costs(); }
