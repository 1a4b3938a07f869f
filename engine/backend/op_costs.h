#pragma once
// What each op moves and computes, for the per-kernel table (achieved GB/s and TFLOP/s beside the roofline).
// Shared by every backend so their numbers are comparable. Only evaluated while timing is on.
#include <algorithm>
#include <array>
#include <string>

#include "backend/backend.h"

namespace qvl::op_cost {

inline KernelEvent make(std::string name, double bytes, double flops) { return {std::move(name), 0, 0, bytes, flops}; }

// "linear 2048x6144 bf16 m<=4": weights grouped by shape and type, and by how many rows they multiply: a few rows
// (decode, memory-bound GEMV) and many (prefill and vision, compute-bound) are different kernels with different
// rooflines.
inline std::string product_name(const char* op, int64_t rows, int64_t cols, WeightFormat format, int64_t m) {
  return std::string(op) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " " +
         std::string(format_traits(format).name) + (m <= 4 ? " m<=4" : " m>4");
}
// `matrices` weight matrices of w's shape read in one pass (2: the fused SwiGLU gate/up projection).
inline KernelEvent linear(const Tensor& x, const LinearWeights& w, const Tensor& y, const char* op = "linear",
                          int matrices = 1) {
  const int64_t m = y.numel() / std::max<int64_t>(1, w.rows());
  return make(product_name(op, w.rows(), w.cols(), w.format, m),
              double(matrices) * double(w.weight.nbytes() + w.scales.nbytes()) + double(x.nbytes() + y.nbytes()),
              2.0 * double(matrices) * double(m) * double(w.rows()) * double(w.cols()));
}
// `count` matrices of one input width read in one pass, named by their rows together ("linear q+k+v 4096x2048 q4
// m<=4"): the weights with their scales, the input once, the f32 outputs.
inline KernelEvent linear_together(const char* op, const Tensor& x, const std::array<const LinearWeights*, 3>& w,
                                   int count) {
  const int64_t k = w[0]->cols(), m = x.numel() / std::max<int64_t>(1, k);
  int64_t rows = 0;
  double bytes = double(x.nbytes());
  for (int i = 0; i < count; ++i) {
    const LinearWeights& wi = *w[std::size_t(i)];
    rows += wi.rows();
    bytes += double(wi.weight.nbytes() + wi.scales.nbytes()) + 4.0 * double(m) * double(wi.rows());
  }
  return make(product_name(op, rows, k, w[0]->format, m), bytes, 2.0 * double(m) * double(rows) * double(k));
}
inline KernelEvent row_norm(const char* op, const Tensor& x) {
  const int64_t width = x.rank() ? x.dim(x.rank() - 1) : 1;
  return make(std::string(op) + " " + std::to_string(width), 2.0 * double(x.nbytes()), 5.0 * double(x.numel()));
}
// x and the residual read, x and y written.
inline KernelEvent add_row_norm(const char* op, const Tensor& x) {
  const int64_t width = x.rank() ? x.dim(x.rank() - 1) : 1;
  return make(std::string(op) + " " + std::to_string(width), 4.0 * double(x.nbytes()), 6.0 * double(x.numel()));
}
// `inputs` tensors like x read, y written (maybe a 16-bit GEMM operand: Projection::into_operand).
inline KernelEvent elementwise(const char* op, const Tensor& x, int inputs, const Tensor& y) {
  return make(op, double(inputs) * double(x.nbytes()) + double(y.nbytes()), 4.0 * double(x.numel()));
}
// Fused attention prologue: q and k read and written, v read, k and v written to the cache, the rotary rows read.
inline KernelEvent qk_norm_rope_append(const Tensor& q, const Tensor& k, const Tensor& cos) {
  return make("qk_norm+rope+append d=" + std::to_string(q.dim(2)),
              2.0 * double(q.nbytes()) + 5.0 * double(k.nbytes()) + 2.0 * double(cos.nbytes()),
              10.0 * double(q.numel() + k.numel()));
}
inline KernelEvent embed(const LinearWeights& table, std::size_t count) {
  const double row_bytes = double(table.nbytes()) / double(std::max<int64_t>(1, table.rows()));
  return make("embed", double(count) * (row_bytes + 4.0 * double(table.cols())), 0);
}
inline KernelEvent rope(const Tensor& x, const Tensor& cos) {
  return make("rope", 2.0 * double(x.nbytes()) + 2.0 * double(cos.nbytes()), 3.0 * double(x.numel()));
}
inline KernelEvent attention(const Tensor& q, const Tensor& k, int64_t kv_len, const AttentionMask& mask) {
  const double s = double(q.dim(0)), hq = double(q.dim(1)), d = double(q.dim(2)), hkv = double(k.dim(1));
  const bool causal = mask.kind == AttentionMask::Kind::Causal;
  double keys = causal ? double(mask.past) + (s + 1) / 2
                       : double(kv_len) / double(std::max<std::size_t>(1, mask.bounds.size() - 1));
  if (!mask.block_layout.empty()) {  // the keys the layout leaves each query, averaged
    const int64_t block = AttentionMask::kSparseBlock;
    double total = 0;
    for (int64_t p = mask.past; p < mask.past + q.dim(0); ++p)
      for (int64_t kb = 0; kb <= p / block; ++kb)
        if (mask.layout_row(p)[kb])
          total += double(std::min(block, p + 1 - kb * block));
    keys = total / s;
  }
  // Decode (one query against the cache) and prefill are different kernels with different rooflines.
  const char* kind = !causal ? "attention segments"
                     : q.dim(0) == 1 ? "attention decode"
                     : mask.block_layout.empty() ? "attention causal" : "attention block-sparse";
  // Keys and values in their type (a bf16 KV cache, or the vision tower's f16 ones, read half the bytes of f32 ones,
  // and are named apart).
  return make(std::string(kind) + " d=" + std::to_string(q.dim(2)) +
                  (k.dtype() == DType::F32 ? "" : " " + std::string(dtype_name(k.dtype()))),
              2.0 * double(q.nbytes()) + 2.0 * double(kv_len) * hkv * d * double(dtype_size(k.dtype())),
              4.0 * s * hq * d * keys);
}
inline KernelEvent rows(const char* op, const Tensor& src, int tensors) {
  return make(op, double(tensors) * double(src.nbytes()), 0);
}

}  // namespace qvl::op_cost
