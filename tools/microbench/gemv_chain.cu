// Microbenchmark, not part of the product (docs/performance.md has its results): a decode layer's four GEMVs (o,
// gate+up, down, q+k+v; bf16, the 2B's shapes), 8 layers of distinct weights, the L2 flushed before each run, in
// three layouts:
// A: the product's: a warp a row, 8 warps a block, 4 blocks an SM (the register file full), grid = rows / 8, chained
//    with programmatic dependent launch (and once without it);
// B: half an SM a kernel: 2 blocks an SM (also 1 and 3), a grid of at most that many blocks whose warps walk rows,
//    the next row's loads issued before the current row is used, so that the next kernel's blocks are resident while
//    this one runs and ask for their first rows' weights at once;
// C: one persistent kernel for all of them, an atomic grid barrier between consecutive products (run only where
//    the occupancy calculator says every block is resident at once: the barrier would wait forever otherwise).
// x never depends on y here: the barrier and griddepcontrol.wait order the products as a real step's data would.
// Build and run on an SM90 GPU:
//   nvcc -std=c++17 -O3 -arch=sm_90 tools/microbench/gemv_chain.cu -o /tmp/gemv_chain && /tmp/gemv_chain
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

__device__ __forceinline__ float bf(uint32_t w, int hi) { return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16)); }
__device__ __forceinline__ void allow_next() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void wait_prev() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

template <int kBatch>
__device__ __forceinline__ float dot_batch(const uint4 (&v)[kBatch], const float* x, int base, int k) {
  float acc = 0;
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    const int i = base + u * 256;
    if (i >= k) break;
    const float4 x0 = *reinterpret_cast<const float4*>(x + i), x1 = *reinterpret_cast<const float4*>(x + i + 4);
    acc += bf(v[u].x, 0) * x0.x + bf(v[u].x, 1) * x0.y + bf(v[u].y, 0) * x0.z + bf(v[u].y, 1) * x0.w +
           bf(v[u].z, 0) * x1.x + bf(v[u].z, 1) * x1.y + bf(v[u].w, 0) * x1.z + bf(v[u].w, 1) * x1.w;
  }
  return acc;
}

template <int kBatch>
__device__ __forceinline__ void load_batch(uint4 (&v)[kBatch], const uint16_t* r, int base, int k) {
#pragma unroll
  for (int u = 0; u < kBatch; ++u) if (base + u * 256 < k) v[u] = *reinterpret_cast<const uint4*>(r + base + u * 256);
}

__global__ void __launch_bounds__(256, 4) gemv_a(const uint16_t* w, const float* x, float* y, int n, int k) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = blockIdx.x * 8 + warp;
  allow_next();
  if (row >= n) { wait_prev(); return; }
  const uint16_t* r = w + (int64_t)row * k;
  uint4 v[8];
  load_batch(v, r, lane * 8, k);
  wait_prev();
  float acc = dot_batch(v, x, lane * 8, k);
  for (int base = lane * 8 + 2048; base < k; base += 2048) { load_batch(v, r, base, k); acc += dot_batch(v, x, base, k); }
  for (int o = 16; o; o /= 2) acc += __shfl_xor_sync(~0u, acc, o);
  if (lane == 0) y[row] = acc;
}

// A warp's rows of w (n x k), `warps` apart from `row`, batch by batch (8 loads a lane), the next batch asked for
// before the current one is used; `cur` holds the first batch, already asked for.
__device__ __forceinline__ void walk_rows(const uint16_t* w, const float* x, float* y, int n, int k, int row, int base,
                                          int warps, uint4 (&cur)[8]) {
  const int lane = threadIdx.x % 32;
  uint4 nxt[8];
  float acc = 0;
  while (row < n) {
    int nrow = row, nbase = base + 2048;
    if (nbase >= k) nrow = row + warps, nbase = lane * 8;
    if (nrow < n) load_batch(nxt, w + (int64_t)nrow * k, nbase, k);
    acc += dot_batch(cur, x, base, k);
    if (nrow != row) {
      for (int o = 16; o; o /= 2) acc += __shfl_xor_sync(~0u, acc, o);
      if (lane == 0) y[row] = acc;
      acc = 0;
    }
    row = nrow, base = nbase;
#pragma unroll
    for (int u = 0; u < 8; ++u) cur[u] = nxt[u];
  }
}

// k == 2048 or a multiple: a row is k / 2048 batches of 8 loads a lane. Rows walked with a stride of all warps.
template <int kMinBlocks>
__global__ void __launch_bounds__(256, kMinBlocks) gemv_b(const uint16_t* w, const float* x, float* y, int n, int k) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * 8;
  int row = blockIdx.x * 8 + threadIdx.x / 32;
  allow_next();
  uint4 cur[8];
  int base = lane * 8;
  if (row < n) load_batch(cur, w + (int64_t)row * k, base, k);
  wait_prev();
  walk_rows(w, x, y, n, k, row, base, warps, cur);
}

// C: one persistent kernel for all the GEMVs, a grid barrier between consecutive ones; each warp asks for its first
// row of the next matrix before it waits at the barrier (the weights do not depend on the previous product).
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    unsigned seen;
    do { asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(counter)); } while (seen < target);
  }
  __syncthreads();
}
struct Shapes { int n[4], k[4]; };
template <int kMinBlocks>
__global__ void __launch_bounds__(256, kMinBlocks) gemv_c(const uint16_t* w, const float* x, float* y, int layers, Shapes sh, unsigned* counter) {
  const int lane = threadIdx.x % 32, warps = gridDim.x * 8, warp0 = blockIdx.x * 8 + threadIdx.x / 32;
  unsigned target = 0;
  const uint16_t* wl = w;
  uint4 cur[8];
  for (int l = 0; l < layers; ++l)
    for (int s = 0; s < 4; ++s) {
      const int n = sh.n[s], k = sh.k[s];
      int row = warp0, base = lane * 8;
      if (row < n) load_batch(cur, wl + (int64_t)row * k, base, k);
      target += gridDim.x;
      grid_barrier(counter, target);  // the previous product is complete (x is ready)
      walk_rows(wl, x, y, n, k, row, base, warps, cur);
      wl += (size_t)n * k;
    }
}

template <typename K>
void launch(K kernel, int grid, const uint16_t* w, const float* x, float* y, int n, int k) {
  cudaLaunchConfig_t c{};
  c.gridDim = grid; c.blockDim = 256;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  c.attrs = at; c.numAttrs = 1;
  cudaLaunchKernelEx(&c, kernel, w, x, y, n, k);
}

int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int shapes[4][2] = {{2048, 2048}, {12288, 2048}, {2048, 6144}, {4096, 2048}};  // o, gate+up, down, q+k+v
  size_t per_layer = 0; for (auto& s : shapes) per_layer += (size_t)s[0] * s[1];
  const int layers = 8;
  uint16_t* w; float *x, *y;
  cudaMalloc(&w, per_layer * layers * 2); cudaMalloc(&x, 6144 * 4); cudaMalloc(&y, 12288 * 4);
  cudaMemset(w, 0x3c, per_layer * layers * 2); cudaMemset(x, 0, 6144 * 4);
  char* flush; cudaMalloc(&flush, 256 << 20);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  const double mb = double(per_layer) * layers * 2 / 1e6;
  const auto time = [&](const char* name, auto one) {
    std::vector<float> ms;
    for (int i = 0; i < 25; ++i) {
      cudaMemsetAsync(flush, i, 256 << 20);
      cudaEventRecord(a);
      size_t off = 0;
      for (int l = 0; l < layers; ++l)
        for (int s = 0; s < 4; ++s) { one(w + off, shapes[s][0], shapes[s][1]); off += (size_t)shapes[s][0] * shapes[s][1]; }
      cudaEventRecord(b); cudaEventSynchronize(b);
      float t; cudaEventElapsedTime(&t, a, b); if (i >= 5) ms.push_back(t * 1000);
    }
    std::sort(ms.begin(), ms.end());
    const float t = ms[ms.size() / 2];
    std::printf("%-40s %8.1f us for %d layers: %6.2f us a layer, %5.2f TB/s\n", name, t, layers, t / layers, mb / t);
  };
  time("A: warp a row, 4 blocks an SM", [&](const uint16_t* wl, int n, int k) { launch(gemv_a, (n + 7) / 8, wl, x, y, n, k); });
  time("B: 2 blocks an SM, rows walked", [&](const uint16_t* wl, int n, int k) { launch(gemv_b<2>, std::min((n + 7) / 8, 2 * sms), wl, x, y, n, k); });
  time("B': 1 block an SM, rows walked", [&](const uint16_t* wl, int n, int k) { launch(gemv_b<2>, std::min((n + 7) / 8, sms), wl, x, y, n, k); });
  time("B'': 3 blocks an SM (85 regs)", [&](const uint16_t* wl, int n, int k) { launch(gemv_b<3>, std::min((n + 7) / 8, 3 * sms), wl, x, y, n, k); });
  unsigned* counter; cudaMalloc(&counter, 4);
  Shapes sh; for (int i = 0; i < 4; ++i) sh.n[i] = shapes[i][0], sh.k[i] = shapes[i][1];
  for (int bps : {1, 2, 3, 4}) {
    int resident = 0;
    if (bps <= 2) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, gemv_c<2>, 256, 0);
    else if (bps == 3) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, gemv_c<3>, 256, 0);
    else cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, gemv_c<4>, 256, 0);
    if (resident < bps) {
      std::printf("C: persistent, %d blocks an SM: only %d resident, not run\n", bps, resident);
      continue;
    }
    std::vector<float> ms;
    for (int i = 0; i < 25; ++i) {
      cudaMemsetAsync(flush, i, 256 << 20);
      cudaMemsetAsync(counter, 0, 4);
      cudaEventRecord(a);
      if (bps <= 2) gemv_c<2><<<bps * sms, 256>>>(w, x, y, layers, sh, counter);
      else if (bps == 3) gemv_c<3><<<bps * sms, 256>>>(w, x, y, layers, sh, counter);
      else gemv_c<4><<<bps * sms, 256>>>(w, x, y, layers, sh, counter);
      cudaEventRecord(b); cudaEventSynchronize(b);
      float t; cudaEventElapsedTime(&t, a, b); if (i >= 5) ms.push_back(t * 1000);
    }
    std::sort(ms.begin(), ms.end());
    const float t = ms[ms.size() / 2];
    std::printf("C: persistent, %d blocks an SM, grid barrier %8.1f us: %6.2f us a layer, %5.2f TB/s\n", bps, t, t / layers, mb / t);
  }
  time("A without PDL attr (plain launch)", [&](const uint16_t* wl, int n, int k) { gemv_a<<<(n + 7) / 8, 256>>>(wl, x, y, n, k); });
  std::printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
