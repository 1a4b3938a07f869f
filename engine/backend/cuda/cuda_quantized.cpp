// Projections with q8/q4 weights on the CUDA backend. Decode rows: the activations quantised per block (with the
// input RMSNorm folded in), then the quantised GEMV (gemv_quantized.cu), which runs q+k+v or gate/up + SwiGLU in one
// launch and adds the residual in its epilogue, as the float GEMVs do. More rows (prefill, vision): the matrices
// dequantised into a workspace of the GEMM's type (bf16; f32 on SM61, whose tiled GEMM computes in f32), then the
// float path. Where cuBLAS runs the products, a projection's matrices are dequantised one after another into one
// workspace and the float projection runs over them whole (project_dequantised): the 2B's gate and up are 50 MB of
// bf16 workspace for the moment of their product. SM61 dequantises a matrix at a time (f32: 50 MB for a 6144 x 2048
// one) and runs the reference's sequence.
#include <algorithm>
#include <array>
#include <string>

#include "backend/op_costs.h"
#include "core/error.h"
#include "cuda_backend.h"
#include "dequantize.cuh"
#include "gemv_quantized.cuh"
#include "quantize_rows.cuh"

namespace qvl {

static_assert(cuda::kQuantBlock == qvl::kQuantBlock, "the kernels' block is the format's");

cuda::QuantMatrix CudaBackend::quant_matrix(const LinearWeights& lw) const {
  if (lw.weight.device() != Device::CUDA || lw.scales.device() != Device::CUDA)
    fail("linear: quantised weights must be on the GPU (Backend::upload_linear)");
  return {.values = lw.weight.data<uint8_t>(),
          .scales = lw.scales.data<uint16_t>(),
          .format = lw.format == WeightFormat::Q4 ? cuda::QuantFormat::Q4 : cuda::QuantFormat::Q8,
          .rows = lw.rows(),
          .cols = lw.cols(),
          .row_bytes = lw.weight.dim(1),
          .groups = lw.scales.dim(1),
          .group_shift = lw.group_shift()};
}

void CudaBackend::linear_quantised(const Tensor& x, const LinearWeights& lw, const Tensor* bias, Tensor& y) {
  const int64_t k = last_dim(x), m = rows_of(x), n = lw.rows();
  if (m <= ctx_.profile->gemv_max_rows) {
    LinearWeights unit = lw;  // the bias the caller asked for (null where it adds it itself)
    unit.bias = bias ? *bias : Tensor();
    const LinearWeights* w = &unit;
    Tensor* out = &y;
    return quantised_gemv(x, {&w, 1}, {&out, 1}, cuda::QuantEpilogue::Store, {}, "linear");
  }
  Tensor dense = ctx_.device_tensor(dequantised_type(), {n, k}, pool::Owner::Workspace);
  dequantise(lw, dense);
  linear_into(x, LinearWeights::of(dense, lw.bias), bias, y);
}

// SM61: f32 for the tiled GEMM (an f16 workspace would overflow where d · q passes 65504; q8 scales go to 65504).
DType CudaBackend::dequantised_type() const { return ctx_.profile->weights_as_f16 ? DType::F32 : DType::BF16; }

// dense [rows, cols] in dequantised_type() = lw's values.
void CudaBackend::dequantise(const LinearWeights& lw, Tensor& dense) {
  const GpuTimer timer = timed([&] {
    return op_cost::make("dequantize " + std::string(format_traits(lw.format).name),
                         double(lw.weight.nbytes() + lw.scales.nbytes() + dense.nbytes()), 0);
  });
  cuda::dequantize(quant_matrix(lw), dense.raw(), weight_type(dense.dtype()), ctx_.stream);
}

// Many rows on cuBLAS (prefill, vision): the projection's quantised matrices dequantised one after another into one
// workspace, then the float projection over them, so that q8/q4 weights take the bf16 paths: the norm writing the
// GEMMs' 16-bit operand, q+k+v and gate/up each as one product (their matrices lie one after another, as
// upload_linears stores float ones), the attention prologue reading the packed rows, the activations written as the
// next product's operand (operand_type). Before, each matrix was dequantised alone and the reference's sequence ran:
// q4 prefill of 512 tokens 9.6-11.2 ms on an H200 where bf16 took 6.4-6.5 then (2026-11-26), of which the
// dequantisation is ~1.6 ms (1.41 G values a 2B prefill, 14.5 us for a 6144 x 2048 matrix). Predicted ~6.3 ms;
// measured 6.65-6.78 against the tree before's 7.78-7.98 the same day (H200, 2026-11-28; docs/performance.md says
// why the start had moved).
void CudaBackend::project_dequantised(const Projection& p) {
  int64_t rows = 0;
  for (int i = 0; i < p.count; ++i) rows += p.weights[std::size_t(i)]->rows();
  Tensor dense = ctx_.device_tensor(dequantised_type(), {rows, p.weights[0]->cols()}, pool::Owner::Workspace);
  std::array<LinearWeights, 3> floats;
  Projection over_floats = p;
  int64_t first = 0;
  for (int i = 0; i < p.count; ++i) {
    const LinearWeights& w = *p.weights[std::size_t(i)];
    floats[std::size_t(i)] = LinearWeights::of(dense.slice_rows(first, first + w.rows()), w.bias);
    dequantise(w, floats[std::size_t(i)].weight);
    over_floats.weights[std::size_t(i)] = &floats[std::size_t(i)];
    first += w.rows();
  }
  project_floats(over_floats);
}

// The activations quantised (with the input RMSNorm when `norm` has one), then one launch of the quantised GEMV over
// `weights` (1-3 matrices of the same K; SwiGLU: gate and up into outputs[0]).
void CudaBackend::quantised_gemv(const Tensor& x, std::span<const LinearWeights* const> weights,
                                 std::span<Tensor* const> outputs, cuda::QuantEpilogue epilogue,
                                 const cuda::GemvNorm& norm, const char* op) {
  const int64_t k = last_dim(x), m = rows_of(x), blocks = (k + cuda::kQuantBlock - 1) / cuda::kQuantBlock;
  const bool gated = epilogue == cuda::QuantEpilogue::SwiGlu;
  cuda::QuantGemvArgs a;
  a.epilogue = epilogue;
  a.count = int(weights.size());
  int64_t rows = 0;
  double bytes = double(x.nbytes());
  const Tensor* some_bias = nullptr;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const LinearWeights& w = *weights[i];
    if (w.cols() != k || w.format != weights[0]->format || w.group != weights[0]->group)
      fail("quantised GEMV: matrices of different widths, formats or groups in one launch");
    const Tensor* bias = w.bias_or_null();
    if (bias && some_bias && bias->dtype() != some_bias->dtype()) fail("quantised GEMV: biases of different types");
    if (bias) some_bias = bias;
    a.part[i] = {quant_matrix(w), bias ? bias->raw() : nullptr, f32(*outputs[gated ? 0 : i])};
    rows += gated && i > 0 ? 0 : w.rows();
    bytes += double(w.weight.nbytes() + w.scales.nbytes() + (gated && i > 0 ? 0 : outputs[i]->nbytes()));
  }
  a.bias_type = some_bias ? weight_type(some_bias->dtype()) : cuda::WeightType::F32;
  const GpuTimer timer = timed([&] {
    return op_cost::make(std::string(norm.w ? "rms_norm+" : "") + op + " " + std::to_string(rows) + "x" +
                             std::to_string(k) + " " + std::string(format_traits(weights[0]->format).name) + " m<=4",
                         bytes, 2.0 * double(m) * double(rows) * double(k) * (gated ? 2.0 : 1.0));
  });
  ctx_.maybe_inject_fault();
  Tensor values = ctx_.device_tensor(DType::I8, {m, blocks * cuda::kQuantBlock}, pool::Owner::Workspace);
  Tensor scales = ctx_.device_tensor(DType::F32, {m, blocks}, pool::Owner::Workspace);
  Tensor sums = ctx_.device_tensor(DType::I32, {m, blocks}, pool::Owner::Workspace);
  a.x = {values.data<int8_t>(), scales.data<float>(), sums.data<int32_t>(), m, blocks};
  cuda::quantize_rows(f32(x), k, norm, a.x, ctx_.overlapped_launches, ctx_.stream);
  cuda::gemv_quantized(a, ctx_.overlapped_launches, ctx_.stream);
}

// The projection at decode rows in as few launches as the Fusions allow; more rows over the dequantised matrices:
// widened together (project_dequantised) where cuBLAS runs the products, a fusion is on and every matrix is
// quantised; else the reference's sequence, a matrix at a time (with every fusion off, what project_unfused runs).
void CudaBackend::project_quantised(const Projection& p) {
  const int64_t rows = p.rows();
  if (rows > ctx_.profile->gemv_max_rows) {
    const bool all_quantised = std::all_of(p.weights.begin(), p.weights.begin() + p.count,
                                           [](const LinearWeights* w) { return w->quantised(); });
    if (runs_cublas(rows) && fusions_ != Fusions::none() && all_quantised) return project_dequantised(p);
    if (narrowed_outputs(p)) return through_f32(p, [&](const Projection& wide) { project_unfused(*this, wide); });
    return project_unfused(*this, p);
  }
  if (narrowed_outputs(p)) return through_f32(p, [&](const Projection& wide) { project_quantised(wide); });
  bool fold = p.norm && folds_norm(p.norm, rows);
  const Tensor* input = p.input;
  if (fold && p.norm.width() != last_dim(*p.input)) {  // a norm over groups of the row: made here, as the GEMV cannot
    normalise(*this, p.norm, *p.input, *p.normed, p);
    input = p.normed, fold = false;
  }
  const Tensor& in = fold || input != p.input ? *input : unfused_prologue(*this, p);
  const cuda::GemvNorm norm = gemv_norm(p.norm, fold);
  const std::span<const LinearWeights* const> weights(p.weights.data(), std::size_t(p.count));
  const auto each = [&](cuda::QuantEpilogue e, Tensor* const* outputs) {  // a launch a matrix (only unfolded)
    for (int i = 0; i < p.count; ++i) quantised_gemv(in, {&p.weights[std::size_t(i)], 1}, {&outputs[i], 1}, e, {}, "linear");
  };
  switch (p.epilogue) {
    case Epilogue::Store:
      if (p.count == 1 || fold || fusions_.qkv_projection)
        quantised_gemv(in, weights, {p.outputs.data(), std::size_t(p.count)}, cuda::QuantEpilogue::Store, norm,
                       p.count == 3 ? "linear q+k+v" : "linear");
      else
        each(cuda::QuantEpilogue::Store, p.outputs.data());
      return rotate_unfused(*this, p);
    case Epilogue::SwiGLU:
      if (fold || fusions_.swiglu_projection)
        return quantised_gemv(in, weights, {p.outputs.data(), 1}, cuda::QuantEpilogue::SwiGlu, norm, "linear+swiglu");
      each(cuda::QuantEpilogue::Store, p.outputs.data());
      return silu_mul(*p.outputs[0], *p.outputs[1], activation_slot(*this, p));
    case Epilogue::Gelu:
      quantised_gemv(in, weights, {p.outputs.data(), 1}, cuda::QuantEpilogue::Store, norm, "linear");
      return gelu(*p.outputs[0], p.gelu_kind, activation_slot(*this, p));
    case Epilogue::Residual: {
      if (fusions_.norm_into_projection) {
        Tensor* residual = p.residual;
        quantised_gemv(in, weights, {&residual, 1}, cuda::QuantEpilogue::Accumulate, norm, "linear+add");
      } else {
        quantised_gemv(in, weights, {p.outputs.data(), 1}, cuda::QuantEpilogue::Store, norm, "linear");
        add(*p.residual, *p.outputs[0], *p.residual);
      }
      const RowNorm& next = p.then_norm;
      if (next && !folds_norm(next, rows_of(*p.residual)))
        normalise(*this, next, *p.residual, norm_slot(*this, *p.then_normed, *p.residual, p), p);
      return;
    }
  }
}

}  // namespace qvl
