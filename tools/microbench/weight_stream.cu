// Microbenchmark, not part of the product (docs/performance.md has its results): how fast can a decode GEMV's
// weights be streamed on this GPU? (a) the product's pattern: a warp a row, 8 x 16-byte loads a lane issued at once,
// 8 warps a block, 4 blocks an SM; (b) bulk asynchronous copies (cp.async.bulk, the TMA unit) into a ring of
// shared-memory stages, a persistent grid. Both multiply by x (bf16 weights, f32 x) and write y, for the 2B's shapes;
// 8 launches back to back over distinct weights for the small ones, the L2 flushed before each timing.
// Build and run on an SM90 GPU:
//   nvcc -std=c++17 -O3 -arch=sm_90 tools/microbench/weight_stream.cu -o /tmp/weight_stream && /tmp/weight_stream
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <type_traits>

__device__ __forceinline__ float bf(uint32_t w, int hi) { return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16)); }

__global__ void __launch_bounds__(256, 4) ldg_gemv(const uint16_t* w, const float* x, float* y, int n, int k) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * 8 + warp;
  if (row >= n) return;
  const uint16_t* r = w + (int64_t)row * k;
  float acc = 0;
  for (int base = lane * 8; base < k; base += 32 * 8 * 8) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) if (base + u * 256 < k) v[u] = *reinterpret_cast<const uint4*>(r + base + u * 256);
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      if (base + u * 256 >= k) break;
      const float4 x0 = *reinterpret_cast<const float4*>(x + base + u * 256), x1 = *reinterpret_cast<const float4*>(x + base + u * 256 + 4);
      acc += bf(v[u].x, 0) * x0.x + bf(v[u].x, 1) * x0.y + bf(v[u].y, 0) * x0.z + bf(v[u].y, 1) * x0.w +
             bf(v[u].z, 0) * x1.x + bf(v[u].z, 1) * x1.y + bf(v[u].w, 0) * x1.z + bf(v[u].w, 1) * x1.w;
    }
  }
  for (int o = 16; o; o /= 2) acc += __shfl_xor_sync(~0u, acc, o);
  if (lane == 0) y[row] = acc;
}

__device__ __forceinline__ uint32_t smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::"r"(smem(b)),
      "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem(dst)),
               "l"(src), "r"(bytes), "r"(smem(b)) : "memory");
}

// Persistent: block b takes rows [b*rpb, (b+1)*rpb); stages of kRows rows (kRows*k*2 bytes), kStages deep.
template <int kStages, int kRows>
__global__ void __launch_bounds__(256) bulk_gemv(const uint16_t* w, const float* x, float* y, int n, int k, int rpb) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ uint64_t full[kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first = blockIdx.x * rpb, rows = max(0, min(rpb, n - first));
  const int stages = (rows + kRows - 1) / kRows;
  const uint32_t stage_bytes = kRows * k * 2;
  if (threadIdx.x == 0) { for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1); asm volatile("fence.mbarrier_init.release.cluster;"); }
  __syncthreads();
  const auto issue = [&](int st) {
    const int s = st % kStages, r0 = first + st * kRows, nr = min(kRows, first + rows - r0);
    mbar_expect(&full[s], nr * k * 2);
    bulk_copy(buf + s * stage_bytes, w + (int64_t)r0 * k, nr * k * 2, &full[s]);
  };
  if (threadIdx.x == 0) for (int st = 0; st < min(kStages, stages); ++st) issue(st);
  for (int st = 0; st < stages; ++st) {
    const int s = st % kStages;
    mbar_wait(&full[s], (st / kStages) & 1);
    const int r0 = first + st * kRows, nr = min(kRows, first + rows - r0);
    for (int rr = warp; rr < nr; rr += 8) {
      const uint16_t* r = reinterpret_cast<const uint16_t*>(buf + s * stage_bytes) + rr * k;
      float acc = 0;
      for (int i = lane * 8; i < k; i += 256) {
        const uint4 v = *reinterpret_cast<const uint4*>(r + i);
        const float4 x0 = *reinterpret_cast<const float4*>(x + i), x1 = *reinterpret_cast<const float4*>(x + i + 4);
        acc += bf(v.x, 0) * x0.x + bf(v.x, 1) * x0.y + bf(v.y, 0) * x0.z + bf(v.y, 1) * x0.w +
               bf(v.z, 0) * x1.x + bf(v.z, 1) * x1.y + bf(v.w, 0) * x1.z + bf(v.w, 1) * x1.w;
      }
      for (int o = 16; o; o /= 2) acc += __shfl_xor_sync(~0u, acc, o);
      if (lane == 0) y[r0 + rr] = acc;
    }
    __syncthreads();  // stage s consumed
    if (threadIdx.x == 0 && st + kStages < stages) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the loads above before the bulk copy's writes
      issue(st + kStages);
    }
  }
}

int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int shapes[][2] = {{2048, 2048}, {4096, 2048}, {12288, 2048}, {2048, 6144}, {151936, 2048}};
  uint16_t* w; float *x, *y;
  cudaMalloc(&w, (size_t)151936 * 2048 * 2); cudaMalloc(&x, 6144 * 4); cudaMalloc(&y, 151936 * 4);
  cudaMemset(w, 0x3c, (size_t)151936 * 2048 * 2); cudaMemset(x, 0, 6144 * 4);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  // an L2 flush buffer (the weights of a decode step never sit in L2: 3.4 GB a token)
  char* flush; cudaMalloc(&flush, 256 << 20);
  const auto time = [&](auto launch) {
    std::vector<float> ms;
    for (int i = 0; i < 25; ++i) {
      cudaMemsetAsync(flush, i, 256 << 20);
      cudaEventRecord(a); launch(); cudaEventRecord(b); cudaEventSynchronize(b);
      float t; cudaEventElapsedTime(&t, a, b); if (i >= 5) ms.push_back(t * 1000);
    }
    std::sort(ms.begin(), ms.end()); return ms[ms.size() / 2];
  };
  for (auto& sh : shapes) {
    const int n = sh[0], k = sh[1]; const double mb = double(n) * k * 2 / 1e6;
    const int reps = n * k <= 151936 * 2048 / 8 ? 8 : 1;  // back to back over different slices: launches overlap
    const float t0 = time([&] { for (int r = 0; r < reps; ++r) ldg_gemv<<<(n + 7) / 8, 256>>>(w + (size_t)r * n * k, x, y, n, k); }) / reps;
    std::printf("n=%6d k=%d %7.1f MB  ldg: %7.1f us %6.2f TB/s", n, k, mb, t0, mb / t0);
    const auto config = [&](auto stages_c, auto rows_c) {
    constexpr int kStages = decltype(stages_c)::value, kRows = decltype(rows_c)::value;
    std::printf("\n   bulk %d stages of %d rows:", kStages, kRows);
    for (int bps : {1, 2, 3}) {
      const int blocks = sms * bps, rpb = (n + blocks - 1) / blocks;
      const size_t sm = (size_t)kStages * kRows * k * 2;
      if (sm > 220 * 1024 / bps) { std::printf("  x%d: -", bps); continue; }
      cudaFuncSetAttribute(bulk_gemv<kStages, kRows>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
      const float t1 = time([&] { for (int r = 0; r < reps; ++r) bulk_gemv<kStages, kRows><<<blocks, 256, sm>>>(w + (size_t)r * n * k, x, y, n, k, rpb); }) / reps;
      std::printf("  x%d: %6.1f us %5.2f TB/s", bps, t1, mb / t1);
    }
    };
    config(std::integral_constant<int, 4>{}, std::integral_constant<int, 4>{});
    config(std::integral_constant<int, 8>{}, std::integral_constant<int, 2>{});
    config(std::integral_constant<int, 4>{}, std::integral_constant<int, 8>{});
    config(std::integral_constant<int, 16>{}, std::integral_constant<int, 1>{});
    std::printf("\n");
  }
  cudaError_t e = cudaGetLastError(); std::printf("%s\n", cudaGetErrorString(e));
}
