#pragma once
// One thread's strided share of a row (elements threadIdx.x + n·kThreads, n < kPerThread), loaded into registers
// with every load issued before the first is used. Row kernels at decode run one block on one row: a rolled loop of
// dependent-looking loads waits a full memory latency per iteration (measured: 10 µs for a 2048-wide RMSNorm);
// issuing all loads at once waits about one.
#include <cstdint>

namespace qvl::cuda {

template <int kThreads, int kPerThread> struct RowSlice {
  float v[kPerThread];

  __device__ __forceinline__ void load(const float* row, int64_t width) {
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int64_t i = threadIdx.x + int64_t(n) * kThreads;
      v[n] = i < width ? row[i] : 0.0f;
    }
  }
  __device__ __forceinline__ float sum_of_squares() const {
    float s = 0;
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) s += v[n] * v[n];
    return s;
  }
  static constexpr int64_t kCapacity = int64_t(kThreads) * kPerThread;
};

}  // namespace qvl::cuda
