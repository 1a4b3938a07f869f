// A block a row and an output (blockIdx.y: q, k, v): the row's rotation pairs (q, k: 2 values, their 2 biases, 4
// table entries each) or its values (v: the bias), with 32-bit indices and no division by anything but the half
// head size. What it replaces, on an H100 (CUPTI timeline, a 448² picture: 784 rows x 16 heads x 64): the biases
// kernel 13.4 us and two rope kernels 4.4 us each a block, three launches. A first version with a thread a pair over
// the whole grid and 64-bit divisions by the head count and size took 21.9 us, their sum: the index arithmetic, not
// the 19 MB, bound it (~6 us at 3 TB/s). This one took 14.4 us with the biases' type read at run time and 13.8
// templated, with a thread's loads before its stores: what still holds it near twice its traffic is not known.
#include <stdexcept>

#include "bias_rope.cuh"
#include "common.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;

// W: the biases' element type (weights.cuh, with_element_type). Each thread's loads for two pairs (or four v
// values) are issued before its first store.
template <typename W> __global__ void bias_rope_kernel(Biases b, RopeTables t) {
  const int output = int(blockIdx.y), d = int(t.head_dim), half = d / 2, cols = int(t.heads) * d;
  float* __restrict__ y = b.y[output] + int64_t(blockIdx.x) * cols;
  const W* __restrict__ bias = static_cast<const W*>(b.bias[output]);
  if (output == 2) {  // v: the bias only
    if (!bias) return;
    constexpr int kUnroll = 4;
    for (int c0 = int(threadIdx.x); c0 < cols; c0 += kUnroll * kThreads) {
      float v[kUnroll], add[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kThreads;
        v[u] = c < cols ? y[c] : 0.0f, add[u] = c < cols ? widen(bias[c]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (c0 + u * kThreads < cols) y[c0 + u * kThreads] = v[u] + add[u];
    }
    return;
  }
  const float* __restrict__ cos = t.cos + int64_t(blockIdx.x) * d;
  const float* __restrict__ sin = t.sin + int64_t(blockIdx.x) * d;
  constexpr int kUnroll = 2;
  for (int j0 = int(threadIdx.x); j0 < cols / 2; j0 += kUnroll * kThreads) {
    float lo[kUnroll], hi[kUnroll], cl[kUnroll], sl[kUnroll], ch[kUnroll], sh[kUnroll];
    int at[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * kThreads, e = j % half, c = (j / half) * d + e;
      at[u] = j < cols / 2 ? c : -1;
      if (at[u] < 0) continue;
      lo[u] = y[c], hi[u] = y[c + half];
      if (bias) lo[u] += widen(bias[c]), hi[u] += widen(bias[c + half]);
      cl[u] = cos[e], sl[u] = sin[e], ch[u] = cos[e + half], sh[u] = sin[e + half];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (at[u] >= 0) rope_rotate(lo[u], hi[u], cl[u], sl[u], ch[u], sh[u], y[at[u]], y[at[u] + half]);
  }
}

}  // namespace

void add_biases_rope(const Biases& biases, WeightType bias_type, const RopeTables& rope, cudaStream_t stream) {
  if (biases.count != 3) throw std::runtime_error("add_biases_rope: q, k and v");
  if (rope.head_dim % 2 != 0 || rope.heads * rope.head_dim > (int64_t(1) << 30) || rope.rows > 0x7fffffff)
    throw std::runtime_error("add_biases_rope: an even head_dim, rows and row widths within 32-bit indices");
  if (rope.rows * rope.heads * rope.head_dim == 0) return;
  with_element_type(bias_type, [&](auto w) {
    bias_rope_kernel<decltype(w)><<<dim3(unsigned(rope.rows), 3), kThreads, 0, stream>>>(biases, rope);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
