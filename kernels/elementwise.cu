// Grid-stride loops; purely memory-bound (8 or 12 bytes per element), so one arithmetic (apply) serves all four ops,
// four values a thread where the rows allow it, else one.
#include <algorithm>
#include <stdexcept>

#include "activation.cuh"
#include "common.cuh"
#include "elementwise.cuh"
#include "weights.cuh"

namespace qvl::cuda {
namespace {

__device__ __forceinline__ float apply(Elementwise op, float v, float w) {
  switch (op) {
    case Elementwise::Add: return v + w;
    case Elementwise::SiluMul: return v / (1.0f + expf(-v)) * w;
    case Elementwise::GeluTanh: return gelu_tanh(v);
    default: return gelu_erf(v);
  }
}

// An element a thread, row by row (any shape; a 64-bit index).
template <typename Y>
__global__ void elementwise_kernel(Elementwise op, const float* a, const float* b, Y* y, int64_t rows, int64_t cols,
                                   int64_t in_stride) {
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t at = i / cols * in_stride + i % cols;
    store_as(y, i, apply(op, a[at], b ? b[at] : 0.0f));
  }
}

// Four values a thread (whole float4s, 32-bit indices), as narrow4_kernel in convert.cu: an element a thread with a
// 2-byte store wrote a SiLU·mul's bf16 operand at 2.5 TB/s (12.6 µs for 512 x 6144, H100 timeline), slower than the
// f32 version's 3.1 TB/s for more bytes; four a thread, 10.1 µs (2.9 TB/s, the op tests' perf mode). The same
// arithmetic an element, so the same bits. in_quads: the input rows' stride in float4s (one row: the whole tensor).
// kRows: the inputs are rows in_quads apart (else dense, and the index needs no division).
template <typename Y, bool kRows>
__global__ void elementwise4_kernel(Elementwise op, const float4* a, const float4* b, Y* y, int quads, int row_quads,
                                    int in_quads) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < quads; i += int(gridDim.x * blockDim.x)) {
    const int at = kRows ? i / row_quads * in_quads + i % row_quads : i;
    const float4 v = a[at], w = b ? b[at] : make_float4(0, 0, 0, 0);
    store4(y, int64_t(i) * 4, make_float4(apply(op, v.x, w.x), apply(op, v.y, w.y), apply(op, v.z, w.z), apply(op, v.w, w.w)));
  }
}

}  // namespace

void elementwise(const ElementwiseArgs& e, cudaStream_t stream) {
  const int64_t n = e.rows * e.cols;
  if (n == 0) return;
  if (e.in_stride < e.cols) throw std::invalid_argument("elementwise: input rows closer than their width");
  const int threads = 256;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  // Whole rows of float4s (a dense tensor is one row), every input quad inside a 32-bit index.
  const int64_t cols = e.in_stride == e.cols ? n : e.cols, rows = n / cols, in_stride = e.in_stride == e.cols ? n : e.in_stride;
  // The grid-stride index stays a 32-bit int: the last quad plus one stride of the grid (4,096 blocks of 256) fits.
  const int64_t limit = 0x7fffffff - int64_t(4096) * threads;
  const bool four = cols % 4 == 0 && in_stride % 4 == 0 && rows * in_stride / 4 <= limit && aligned(e.a) &&
                    aligned(e.b) && aligned(e.y);
  with_element_type(e.y_type, [&](auto element) {
    using Y = decltype(element);
    if (four) {
      const auto kernel = rows > 1 ? elementwise4_kernel<Y, true> : elementwise4_kernel<Y, false>;
      kernel<<<unsigned(std::min<int64_t>((n / 4 + threads - 1) / threads, 4096)), threads, 0, stream>>>(
          e.op, reinterpret_cast<const float4*>(e.a), reinterpret_cast<const float4*>(e.b), static_cast<Y*>(e.y),
          int(n / 4), int(cols / 4), int(in_stride / 4));
    } else {
      elementwise_kernel<Y><<<unsigned(std::min<int64_t>((n + threads - 1) / threads, 4096)), threads, 0, stream>>>(
          e.op, e.a, e.b, static_cast<Y*>(e.y), rows, cols, in_stride);
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
