// Microbenchmark, not part of the product (docs/performance.md has its results): how a decode kernel waits for the
// one before. A chain of 280 GEMVs (2,048 x 2,048 bf16, a warp a row, 8 warps a block, each lane's weights asked for
// before the wait), each reading the previous one's output, eight matrices in turn (67 MB: past the L2), recorded
// in a CUDA graph, in three ways:
// 0: stream order, no overlap;
// 1: programmatic dependent launch, griddepcontrol.wait (the product's way, common.cuh);
// 2: the same launch, but a counter: each block of the producer fences and adds 1 when done, and the consumer's
//    thread 0 spins on it (acquire) before the block goes on. (No deadlock: a kernel's blocks launch only once every
//    block of the one before has started.)
// Reports microseconds a GEMV, the median of 20 replays. Build and run on an SM90 GPU:
//   nvcc -std=c++17 -O3 -arch=sm_90 tools/microbench/dependent_wait.cu -o /tmp/dependent_wait && /tmp/dependent_wait
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                        \
  do {                                               \
    cudaError_t e = (x);                             \
    if (e != cudaSuccess) {                          \
      printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      exit(1);                                       \
    }                                                \
  } while (0)

constexpr int N = 2048, K = 2048, kWarps = 8, kMats = 8, kChain = 280;

__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

template <int kMode>
__global__ void __launch_bounds__(256, 4)
    gemv(const uint16_t* __restrict__ w, const float* x, float* y, unsigned* wait_counter, unsigned wait_target,
         unsigned* done_counter, int rows, int k) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + warp;
  const uint16_t* r = w + size_t(row) * k;
  uint4 wa[8];
#pragma unroll
  for (int u = 0; u < 8; ++u) wa[u] = *reinterpret_cast<const uint4*>(r + (lane + 32 * u) * 8);
  if (kMode == 1) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (kMode == 2) {
    if (threadIdx.x == 0) {
      unsigned v;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(wait_counter) : "memory");
      } while (v < wait_target);
    }
    __syncthreads();
  }
  float acc = 0.f;
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    const int i = (lane + 32 * u) * 8;
    const float4 x0 = __ldcg(reinterpret_cast<const float4*>(x + i)),
                 x1 = __ldcg(reinterpret_cast<const float4*>(x + i + 4));
    const unsigned ww[4] = {wa[u].x, wa[u].y, wa[u].z, wa[u].w};
    const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc += xs[2 * e] * __uint_as_float(ww[e] << 16);
      acc += xs[2 * e + 1] * __uint_as_float(ww[e] & 0xffff0000u);
    }
  }
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc * 0.01f;
  if (kMode == 2) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(done_counter, 1u);
    }
  }
}

int main() {
  uint16_t* w;
  float* xs;
  unsigned* counters;
  CK(cudaMalloc(&w, size_t(kMats) * N * K * 2));
  CK(cudaMemset(w, 0x3c, size_t(kMats) * N * K * 2));
  CK(cudaMalloc(&xs, size_t(kChain + 1) * N * 4));
  CK(cudaMemset(xs, 0, size_t(kChain + 1) * N * 4));
  CK(cudaMalloc(&counters, (kChain + 1) * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int blocks = N / kWarps;
  for (int mode : {0, 1, 2, 0, 1, 2}) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(counters, 0, (kChain + 1) * 4, s));
    for (int i = 0; i < kChain; ++i) {
      cudaLaunchAttribute a{};
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
      cudaLaunchConfig_t c{};
      c.gridDim = dim3(blocks);
      c.blockDim = dim3(256);
      c.stream = s;
      c.attrs = &a;
      c.numAttrs = (mode == 0 || i == 0) ? 0 : 1;
      const uint16_t* wi = w + size_t(i % kMats) * N * K;
      // The first kernel waits on nothing (counter 0 >= 0).
      unsigned* wait_c = counters + (i == 0 ? kChain : i - 1);
      const unsigned target = i == 0 ? 0u : unsigned(blocks);
      if (mode == 0)
        CK(cudaLaunchKernelEx(&c, gemv<0>, wi, xs + size_t(i) * N, xs + size_t(i + 1) * N, wait_c, target, counters + i,
                              N, K));
      if (mode == 1)
        CK(cudaLaunchKernelEx(&c, gemv<1>, wi, xs + size_t(i) * N, xs + size_t(i + 1) * N, wait_c, target, counters + i,
                              N, K));
      if (mode == 2)
        CK(cudaLaunchKernelEx(&c, gemv<2>, wi, xs + size_t(i) * N, xs + size_t(i + 1) * N, wait_c, target, counters + i,
                              N, K));
    }
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int r = 0; r < 5; ++r) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    std::vector<float> t;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int r = 0; r < 20; ++r) {
      cudaEventRecord(e0, s);
      CK(cudaGraphLaunch(ge, s));
      cudaEventRecord(e1, s);
      CK(cudaStreamSynchronize(s));
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      t.push_back(ms * 1000.f / kChain);
    }
    std::sort(t.begin(), t.end());
    const char* names[] = {"stream order", "PDL griddepcontrol.wait", "PDL + counter"};
    printf("%-26s %.2f us a GEMV (p10 %.2f, p90 %.2f); roofline of 8.4 MB at 3.0 TB/s: 2.80\n", names[mode], t[10],
           t[2], t[18]);
  }
  return 0;
}
