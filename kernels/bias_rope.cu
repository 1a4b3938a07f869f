// A block a row and an output (blockIdx.y: q, k, v): the row's rotation pairs (q, k: 2 values, their 2 biases, 4
// table entries each) or its values (v: the bias), with 32-bit indices and no division by anything but the half
// head size. What it replaces, on an H100 (CUPTI timeline, a 448² picture: 784 rows x 16 heads x 64): the biases
// kernel 13.4 us and two rope kernels 4.4 us each a block, three launches. A first version with a thread a pair over
// the whole grid and 64-bit divisions by the head count and size took 21.9 us, their sum: the index arithmetic, not
// the 19 MB, bound it (~6 us at 3 TB/s).
#include <stdexcept>

#include "bias_rope.cuh"
#include "common.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void bias_rope_kernel(Biases b, WeightType bias_type, RopeTables t) {
  const int output = int(blockIdx.y), d = int(t.head_dim), half = d / 2, cols = int(t.heads) * d;
  float* y = b.y[output] + int64_t(blockIdx.x) * cols;
  const void* bias = b.bias[output];
  if (output == 2) {  // v: the bias only
    if (bias)
      for (int c = int(threadIdx.x); c < cols; c += kThreads) y[c] += load_weight(bias, bias_type, c);
    return;
  }
  const float* cos = t.cos + int64_t(blockIdx.x) * d;
  const float* sin = t.sin + int64_t(blockIdx.x) * d;
  for (int j = int(threadIdx.x); j < cols / 2; j += kThreads) {
    const int e = j % half, c = (j / half) * d + e;
    float lo = y[c], hi = y[c + half];
    if (bias) lo += load_weight(bias, bias_type, c), hi += load_weight(bias, bias_type, c + half);
    rope_rotate(lo, hi, cos[e], sin[e], cos[e + half], sin[e + half], y[c], y[c + half]);
  }
}

}  // namespace

void add_biases_rope(const Biases& biases, WeightType bias_type, const RopeTables& rope, cudaStream_t stream) {
  if (biases.count != 3) throw std::runtime_error("add_biases_rope: q, k and v");
  if (rope.head_dim % 2 != 0 || rope.heads * rope.head_dim > (int64_t(1) << 30) || rope.rows > 0x7fffffff)
    throw std::runtime_error("add_biases_rope: an even head_dim, rows and row widths within 32-bit indices");
  if (rope.rows * rope.heads * rope.head_dim == 0) return;
  bias_rope_kernel<<<dim3(unsigned(rope.rows), 3), kThreads, 0, stream>>>(biases, bias_type, rope);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
