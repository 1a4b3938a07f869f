// A block a row and an output (blockIdx.y: q, k, v): the row's rotation pairs (q, k: 2 values, their 2 biases, 4
// table entries each) or its values (v: the bias), with 32-bit indices and no division by anything but the half
// head size. What it replaces, on an H100 (CUPTI timeline, a 448² picture: 784 rows x 16 heads x 64): the biases
// kernel 13.4 us and two rope kernels 4.4 us each a block, three launches. A first version with a thread a pair over
// the whole grid and 64-bit divisions by the head count and size took 21.9 us, their sum: the index arithmetic, not
// the 19 MB, bound it (~6 us at 3 TB/s). This one took 14.4 us with the biases' type read at run time and 13.8
// templated, with a thread's loads before its stores: what still holds it near twice its traffic is not known.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "bias_rope.cuh"
#include "common.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;

// Output i's entry of a three-entry argument array, chosen by selects: indexed by blockIdx.y, the arrays were copied
// to the stack a thread (a 96-byte frame in ptxas's report for sm_90) and read back from local memory.
template <typename T> __device__ __forceinline__ T pick(const T (&a)[3], int i) { return i == 0 ? a[0] : i == 1 ? a[1] : a[2]; }

// W: the biases' element type (weights.cuh, with_element_type). Each thread's loads for two pairs (or four v
// values) are issued before its first store.
template <typename W> __global__ void bias_rope_kernel(Biases b, RopeTables t, BiasRopeOutputs o) {
  const int output = int(blockIdx.y), d = int(t.head_dim), half = d / 2, cols = int(t.heads) * d;
  const int64_t row = int64_t(blockIdx.x) * cols;
  const float* y = pick(b.y, output) + row;  // (out may be y itself: no __restrict__)
  void* const out = pick(o.out, output);
  const WeightType out_type = pick(o.type, output);
  const W* __restrict__ bias = static_cast<const W*>(pick(b.bias, output));
  if (output == 2) {  // v: the bias only
    if (!bias && out_type == WeightType::F32) return;  // in place: nothing to do
    constexpr int kUnroll = 4;
    for (int c0 = int(threadIdx.x); c0 < cols; c0 += kUnroll * kThreads) {
      float v[kUnroll], add[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kThreads;
        v[u] = c < cols ? y[c] : 0.0f, add[u] = c < cols && bias ? widen(bias[c]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (c0 + u * kThreads < cols) store_activation(out, out_type, row + c0 + u * kThreads, bias ? v[u] + add[u] : v[u]);
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
    for (int u = 0; u < kUnroll; ++u) {
      if (at[u] < 0) continue;
      float out_lo, out_hi;
      rope_rotate(lo[u], hi[u], cl[u], sl[u], ch[u], sh[u], out_lo, out_hi);
      store_activation(out, out_type, row + at[u], out_lo);
      store_activation(out, out_type, row + at[u] + half, out_hi);
    }
  }
}

// The same arithmetic in 16-byte pieces, where head_dim is a multiple of 8 and every pointer is aligned for them: a
// thread takes four rotation pairs of q or k (four values from each half of a head, four of each table) or eight v
// values, and the threads run over rows * cols / 8 such items, several rows a block (a block a row above ran 256
// threads through one row's 4 KB). Why: the kernel above took 11.8-12.1 us a block for ~19 MB (H200, CUPTI, a 448²
// picture), ~1.6 TB/s, with a 4-byte access per value and the table read a value at a time; this one 8.8 us (~2.2
// TB/s; predicted ~6). What held it, likely: its argument arrays indexed by blockIdx.y, which ptxas copied to a
// stack frame a thread (56 bytes; 96 with the outputs' arrays, and 11.0 us with f16 k and v) and read back from
// local memory. Chosen by selects (pick): 4.8-5.1 us with f16 k and v (~3.2 TB/s of its 16 MB), 37-38 registers.
template <typename W> __global__ void bias_rope_by_four_kernel(Biases b, RopeTables t, BiasRopeOutputs o) {
  const int output = int(blockIdx.y), d = int(t.head_dim), half = d / 2, cols = int(t.heads) * d;
  const int per_row = cols / 8, items = int(t.rows) * per_row;
  const float* y = pick(b.y, output);  // (out may be y itself: no __restrict__)
  void* const out = pick(o.out, output);
  const WeightType out_type = pick(o.type, output);
  const W* __restrict__ bias = static_cast<const W*>(pick(b.bias, output));
  if (output == 2 && !bias && out_type == WeightType::F32) return;  // v in place without a bias: nothing to do
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < items; i += int(gridDim.x * blockDim.x)) {
    const int row = i / per_row, item = i - row * per_row;
    const float* yr = y + int64_t(row) * cols;
    const int64_t out_row = int64_t(row) * cols;
    if (output == 2) {  // v: eight values and their biases
      const int c = item * 8;
      float4 v0 = load4(yr, c), v1 = load4(yr, c + 4);
      if (bias) {
        const float4 a0 = load4(bias, c), a1 = load4(bias, c + 4);
        v0.x += a0.x, v0.y += a0.y, v0.z += a0.z, v0.w += a0.w;
        v1.x += a1.x, v1.y += a1.y, v1.z += a1.z, v1.w += a1.w;
      }
      store4_activation(out, out_type, out_row + c, v0), store4_activation(out, out_type, out_row + c + 4, v1);
      continue;
    }
    const int quads = half / 4, e = (item % quads) * 4, c = (item / quads) * d + e;
    float4 lo = load4(yr, c), hi = load4(yr, c + half);
    if (bias) {
      const float4 blo = load4(bias, c), bhi = load4(bias, c + half);
      lo.x += blo.x, lo.y += blo.y, lo.z += blo.z, lo.w += blo.w;
      hi.x += bhi.x, hi.y += bhi.y, hi.z += bhi.z, hi.w += bhi.w;
    }
    const float* cos = t.cos + int64_t(row) * d;
    const float* sin = t.sin + int64_t(row) * d;
    const float4 cl = load4(cos, e), sl = load4(sin, e), ch = load4(cos, e + half), sh = load4(sin, e + half);
    float4 out_lo, out_hi;
    rope_rotate(lo.x, hi.x, cl.x, sl.x, ch.x, sh.x, out_lo.x, out_hi.x);
    rope_rotate(lo.y, hi.y, cl.y, sl.y, ch.y, sh.y, out_lo.y, out_hi.y);
    rope_rotate(lo.z, hi.z, cl.z, sl.z, ch.z, sh.z, out_lo.z, out_hi.z);
    rope_rotate(lo.w, hi.w, cl.w, sl.w, ch.w, sh.w, out_lo.w, out_hi.w);
    store4_activation(out, out_type, out_row + c, out_lo), store4_activation(out, out_type, out_row + c + half, out_hi);
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void add_biases_rope(const Biases& biases, WeightType bias_type, const RopeTables& rope, const BiasRopeOutputs& outputs,
                     cudaStream_t stream) {
  if (biases.count != 3) throw std::runtime_error("add_biases_rope: q, k and v");
  for (int i = 0; i < 3; ++i)
    if (!outputs.out[i] || (outputs.type[i] == WeightType::F32) != (outputs.out[i] == biases.y[i]))
      throw std::runtime_error("add_biases_rope: an f32 result in place, a 16-bit one in a tensor of its own");
  if (rope.head_dim % 2 != 0 || rope.heads * rope.head_dim > (int64_t(1) << 30) || rope.rows > 0x7fffffff)
    throw std::runtime_error("add_biases_rope: an even head_dim, rows and row widths within 32-bit indices");
  if (rope.rows * rope.heads * rope.head_dim == 0) return;
  const uintptr_t bias_bytes = bias_type == WeightType::F32 ? 16 : 8;  // four biases
  // Pieces counted in 32 bits with a grid's stride of room past them.
  const int64_t items = rope.rows * rope.heads * rope.head_dim / 8;
  bool by_four = rope.head_dim % 8 == 0 && items < (int64_t(1) << 30) && aligned(rope.cos, 16) && aligned(rope.sin, 16);
  for (int i = 0; i < 3; ++i)
    by_four = by_four && aligned(biases.y[i], 16) && aligned(biases.bias[i], bias_bytes) &&
              aligned(outputs.out[i], outputs.type[i] == WeightType::F32 ? 16 : 8);
  with_element_type(bias_type, [&](auto w) {
    using W = decltype(w);
    if (by_four) {
      const auto blocks = unsigned(std::min<int64_t>((items + kThreads - 1) / kThreads, 8192));
      bias_rope_by_four_kernel<W><<<dim3(blocks, 3), kThreads, 0, stream>>>(biases, rope, outputs);
    } else {
      bias_rope_kernel<W><<<dim3(unsigned(rope.rows), 3), kThreads, 0, stream>>>(biases, rope, outputs);
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
