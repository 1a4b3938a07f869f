// One warp per output row at a time, eight warps a block. Bytes per token: N·K (q8) or N·K/2 (q4) plus N·K/group·2 of scales;
// the activations are read once per block from L2 (8 KB for K = 2048) and quantised into shared memory while the
// first weights are on their way (asked for before x: nothing writes weights, so with an overlapped launch they
// come while the previous kernel drains). Lane l takes the row's 32-value blocks l, l + 32, ...: a warp's loads of
// one step are 1 KB of q8 or 512 B of q4, contiguous; kBatch blocks a lane are in flight before the first is used.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "gemv_quantized.cuh"
#include "row_slice.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32, kBatch = 4;
constexpr std::size_t kSharedLimit = 48 * 1024;

struct SharedLayout {
  std::size_t normed = 0, values = 0, scales = 0, sums = 0, total = 0;  // byte offsets
  __host__ __device__ SharedLayout(int64_t m, int64_t k, bool is_normed) {
    const int64_t blocks = (k + kQuantBlock - 1) / kQuantBlock;
    values = is_normed ? (std::size_t(m * k) * sizeof(float) + 15) / 16 * 16 : 0;
    scales = values + std::size_t(m * blocks * kQuantBlock);
    sums = scales + std::size_t(m * blocks) * sizeof(float);
    total = sums + std::size_t(m * blocks) * sizeof(int32_t);
  }
};

// One 32-value block of a weight row, raw: q8 fills 8 words, q4 4 (8 nibbles each).
template <bool kQ4> struct WeightBlock {
  uint4 lo, hi;
  __device__ __forceinline__ void load(const uint8_t* row, int64_t b) {
    if constexpr (kQ4) {
      lo = *reinterpret_cast<const uint4*>(row + b * kQuantBlock / 2);
    } else {
      lo = *reinterpret_cast<const uint4*>(row + b * kQuantBlock);
      hi = *reinterpret_cast<const uint4*>(row + b * kQuantBlock + 16);
    }
  }
  // The integer dot with a quantised activation block (xv: its 8 words, sum: its values' sum).
  __device__ __forceinline__ int dot(const int xv[8], int sum) const {
    const int w[8] = {int(lo.x), int(lo.y), int(lo.z), int(lo.w), int(hi.x), int(hi.y), int(hi.z), int(hi.w)};
    int d = 0;
    if constexpr (kQ4) {
      // Low nibbles of word i are values 4i..4i+3 (x word i), high nibbles 16+4i.. (x word 4 + i); stored + 8.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        d = __dp4a(w[i] & 0x0f0f0f0f, xv[i], d);
        d = __dp4a((w[i] >> 4) & 0x0f0f0f0f, xv[4 + i], d);
      }
      return d - 8 * sum;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) d = __dp4a(w[i], xv[i], d);
      return d;
    }
  }
};

// Block (row, b) of x quantised by one thread, as quantize_activation_row (backend/quantize.cpp) does: the largest
// magnitude, the scale, the values rounded to nearest even, their sum. A thread a block and no shuffles: a warp a block
// (five dependent shuffles for the maximum, five for the sum) kept each block of the kernel ~3 µs from its first
// product, which the 151,936-row output head paid 36 waves deep (320 µs for 330 MB). The thread reads its 32 values as
// float4s starting at its own offset (j + t) % 8: a quarter-warp's eight float4s then fall in eight different banks.
__device__ __forceinline__ void quantise_block(const float* x, int64_t k, int64_t row, int64_t b, int64_t blocks,
                                               int8_t* values, float* scales, int32_t* sums) {
  const float* in = x + row * k + b * kQuantBlock;
  const int64_t valid = k - b * kQuantBlock;  // values of this block inside the row (the rest is padding)
  float v[kQuantBlock];
  if (valid >= kQuantBlock && reinterpret_cast<uintptr_t>(in) % 16 == 0) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int jj = (j + int(threadIdx.x)) % 8;
      const float4 f = reinterpret_cast<const float4*>(in)[jj];
      v[4 * jj] = f.x, v[4 * jj + 1] = f.y, v[4 * jj + 2] = f.z, v[4 * jj + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kQuantBlock; ++i) v[i] = i < valid ? in[i] : 0.0f;
  }
  float amax = 0;
  bool finite = true;
#pragma unroll
  for (int i = 0; i < kQuantBlock; ++i) finite = finite && isfinite(v[i]), amax = fmaxf(amax, fabsf(v[i]));
  const float inv = finite && amax > 0 ? 127.0f / amax : 0.0f;
  int sum = 0;
  uint32_t words[8];
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    uint32_t word = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int q = finite ? __float2int_rn(v[4 * w + e] * inv) : 0;
      sum += q;
      word |= uint32_t(uint8_t(int8_t(q))) << (8 * e);
    }
    words[w] = word;
  }
  const int64_t block = row * blocks + b;
  uint4* out = reinterpret_cast<uint4*>(values + block * kQuantBlock);
  out[0] = make_uint4(words[0], words[1], words[2], words[3]);
  out[1] = make_uint4(words[4], words[5], words[6], words[7]);
  scales[block] = finite ? amax / 127.0f : __int_as_float(0x7fc00000);
  sums[block] = sum;
}

// The quantised matrix row `row` of the launch counts through the parts in order (SwiGLU: gate's rows, up alongside).
struct RowOf {
  QuantGemvPart part;
  int64_t row;
};
template <bool kGated> __device__ __forceinline__ RowOf locate(const QuantGemvArgs& a, int64_t row) {
  QuantGemvPart part = a.part[0];
  if (!kGated)
#pragma unroll  // unrolled: a dynamic index into the parameter struct would copy it to local memory
    for (int p = 1; p < 3; ++p)
      if (p < a.count && row >= part.w.rows) row -= part.w.rows, part = a.part[p];
  return {part, row};
}

// Rows are taken grid-stride by warps (gridDim.x is capped at the blocks the GPU holds at once, a.max_blocks): each
// block quantises x once and then streams as many rows as it gets, so a 151,936-row head does not quantise x 19,000
// times.
template <int M, bool kQ4, QuantEpilogue E, bool kNormed>
__global__ void __launch_bounds__(kThreads) gemv_quantized_kernel(QuantGemvArgs a, int64_t total_rows) {
  constexpr bool kGated = E == QuantEpilogue::SwiGlu;
  extern __shared__ __align__(16) unsigned char shared[];
  const SharedLayout layout(M, a.k, kNormed);
  auto* xq = reinterpret_cast<int8_t*>(shared + layout.values);
  auto* xs = reinterpret_cast<float*>(shared + layout.scales);
  auto* xsum = reinterpret_cast<int32_t*>(shared + layout.sums);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t blocks = (a.k + kQuantBlock - 1) / kQuantBlock, stride = int64_t(gridDim.x) * kWarps;

  int64_t global_row = int64_t(blockIdx.x) * kWarps + warp;
  RowOf at = locate<kGated>(a, global_row);
  WeightBlock<kQ4> wa[kBatch], wb[kBatch];
  const auto load_batch = [&](int64_t base) {
    const uint8_t* w0 = at.part.w.values + at.row * at.part.w.row_bytes;
    const uint8_t* w1 = kGated ? a.part[1].w.values + at.row * a.part[1].w.row_bytes : nullptr;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t b = base + u * 32;
      if (b < blocks) {
        wa[u].load(w0, b);
        if (kGated) wb[u].load(w1, b);
      }
    }
  };
  allow_next_kernel();
  if (global_row < total_rows) load_batch(lane);  // nothing writes weights: asked for before x
  wait_for_previous_kernel();
  const float* x = a.x;
  if constexpr (kNormed) {
    float* normed = reinterpret_cast<float*>(shared + layout.normed);
    RmsNormRow<kThreads, 8> norm;
    for (int m = 0; m < M; ++m) {
      norm.load(a.x + m * a.k, a.k);
      norm.finish(a.norm.w, a.norm.type, a.norm.eps, normed + m * a.k, WeightType::F32);
    }
    __syncthreads();
    x = normed;
  }
  for (int64_t t = threadIdx.x; t < M * blocks; t += kThreads) quantise_block(x, a.k, t / blocks, t % blocks, blocks, xq, xs, xsum);
  __syncthreads();

  for (; global_row < total_rows; global_row += stride) {
    if (global_row != int64_t(blockIdx.x) * kWarps + warp) {
      at = locate<kGated>(a, global_row);
      load_batch(lane);
    }
    const __half* s0 = reinterpret_cast<const __half*>(at.part.w.scales) + at.row * at.part.w.groups;
    const __half* s1 = kGated ? reinterpret_cast<const __half*>(a.part[1].w.scales) + at.row * a.part[1].w.groups : nullptr;
    const int per_group = at.part.w.blocks_per_group;
    float acc0[M] = {}, acc1[M] = {};
    for (int64_t base = lane; base < blocks; base += 32 * kBatch) {
      if (base != lane) load_batch(base);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int64_t b = base + u * 32;
        if (b >= blocks) break;
        const float d0 = __half2float(s0[b / per_group]), d1 = kGated ? __half2float(s1[b / per_group]) : 0.0f;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const int64_t xb = m * blocks + b;
          const uint4 x0 = *reinterpret_cast<const uint4*>(xq + xb * kQuantBlock);
          const uint4 x1 = *reinterpret_cast<const uint4*>(xq + xb * kQuantBlock + 16);
          const int xv[8] = {int(x0.x), int(x0.y), int(x0.z), int(x0.w), int(x1.x), int(x1.y), int(x1.z), int(x1.w)};
          acc0[m] += d0 * xs[xb] * float(wa[u].dot(xv, xsum[xb]));
          if (kGated) acc1[m] += d1 * xs[xb] * float(wb[u].dot(xv, xsum[xb]));
        }
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      acc0[m] = warp_sum(acc0[m]);
      if (kGated) acc1[m] = warp_sum(acc1[m]);
    }
    if (lane != 0) continue;
    const float bias = !kGated && at.part.bias ? load_weight(at.part.bias, a.bias_type, at.row) : 0.0f;
    const int64_t n = at.part.w.rows;
    for (int m = 0; m < M; ++m) {
      float* y = at.part.y + m * n + at.row;
      const float s = acc0[m];
      if constexpr (kGated) *y = s / (1.0f + expf(-s)) * acc1[m];
      else if constexpr (E == QuantEpilogue::Accumulate) *y += s + bias;  // as the unfused add: y + (x·wᵀ + b)
      else *y = s + bias;
    }
  }
}

template <int M, bool kQ4, QuantEpilogue E>
void launch_typed(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  int64_t rows = a.part[0].w.rows;
  if (E != QuantEpilogue::SwiGlu)
    for (int p = 1; p < a.count; ++p) rows += a.part[p].w.rows;
  const int64_t blocks = std::min<int64_t>((rows + kWarps - 1) / kWarps, std::max<int64_t>(1, a.max_blocks));
  const dim3 grid{unsigned(blocks)}, block{unsigned(kThreads)};
  const bool normed = a.norm.w != nullptr;
  const std::size_t shared = SharedLayout(M, a.k, normed).total;
  if (normed) launch_kernel(gemv_quantized_kernel<M, kQ4, E, true>, grid, block, shared, stream, overlap, a, rows);
  else launch_kernel(gemv_quantized_kernel<M, kQ4, E, false>, grid, block, shared, stream, overlap, a, rows);
}

template <int M, QuantEpilogue E> void launch_rows(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  if (a.part[0].w.format == QuantFormat::Q4) launch_typed<M, true, E>(a, overlap, stream);
  else launch_typed<M, false, E>(a, overlap, stream);
}

template <QuantEpilogue E> void launch(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  switch (a.m) {
    case 1: return launch_rows<1, E>(a, overlap, stream);
    case 2: return launch_rows<2, E>(a, overlap, stream);
    case 3: return launch_rows<3, E>(a, overlap, stream);
    default: return launch_rows<4, E>(a, overlap, stream);
  }
}

}  // namespace

bool gemv_quantized_fits(int64_t m, int64_t k, bool normed) {
  return m >= 1 && m <= 4 && k >= 1 && k < (int64_t(1) << 30) && SharedLayout(m, k, normed).total <= kSharedLimit;
}

void gemv_quantized(const QuantGemvArgs& a, bool overlap, cudaStream_t stream) {
  if (a.m == 0 || a.part[0].w.rows == 0) return;
  if (!gemv_quantized_fits(a.m, a.k, a.norm.w != nullptr))
    throw_cuda_error(cudaErrorInvalidValue, "gemv_quantized: the shape does not fit (gemv_quantized_fits)", __FILE__,
                     __LINE__);
  switch (a.epilogue) {
    case QuantEpilogue::Store: launch<QuantEpilogue::Store>(a, overlap, stream); break;
    case QuantEpilogue::Accumulate: launch<QuantEpilogue::Accumulate>(a, overlap, stream); break;
    case QuantEpilogue::SwiGlu: launch<QuantEpilogue::SwiGlu>(a, overlap, stream); break;
  }
}

}  // namespace qvl::cuda
