// Row-wise and element-wise ops of the CUDA backend: norms (also with the residual add folded in), element-wise
// activations, embedding lookups, RoPE, row copies and scatters, patchify, greedy decoding's pick.
#include "add_layer_norm.cuh"
#include "add_rms_norm.cuh"
#include "backend/op_costs.h"
#include "common.cuh"
#include "core/error.h"
#include "cuda_backend.h"
#include "dequantize.cuh"
#include "greedy_pick.cuh"
#include "top_k_candidates.cuh"
#include "norm.cuh"
#include "patchify.cuh"
#include "rope.cuh"
#include "rows.cuh"

namespace qvl {

namespace {

// The kernels' arguments for a norm of x's rows (b: LayerNorm's bias, or null) into y.
cuda::RowNormArgs row_norm_args(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) {
  const ActivationOut out = activation_out(y);
  cuda::RowNormArgs a;
  a.x = f32(x);
  a.w = w.raw();
  a.w_type = weight_type(w.dtype());
  if (b) a.b = b->raw(), a.b_type = weight_type(b->dtype());
  a.eps = eps;
  a.y = out.data;
  a.y_type = out.type;
  a.rows = rows_of(x);
  a.width = last_dim(x);
  return a;
}

}  // namespace

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  const GpuTimer timer = timed([&] { return op_cost::row_norm("rms_norm", x); });
  cuda::rms_norm(row_norm_args(x, w, nullptr, eps, y), ctx_.stream);
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) {
  const GpuTimer timer = timed([&] { return op_cost::row_norm("layer_norm", x); });
  cuda::layer_norm(row_norm_args(x, w, &b, eps, y), ctx_.stream);
}

// x += residual (+ residual_bias, LayerNorm only: the bias of the GEMM that made the residual), then y = norm(x), one
// pass over each row; the norm runs over whole rows.
void CudaBackend::add_norm(Tensor& x, const Tensor& residual, const Tensor* residual_bias, const RowNorm& norm, Tensor& y) {
  const int64_t width = last_dim(x);
  if (residual.numel() != x.numel() || norm.width() != width || (residual_bias && residual_bias->numel() != width))
    fail("add+norm: shapes x ", shape_to_string(x.shape()), " residual ", shape_to_string(residual.shape()), " norm ",
         norm.width());
  const bool rms = norm.kind == RowNorm::Kind::Rms;
  if (rms && residual_bias) fail("add+rms_norm: no residual bias");
  cuda::RowNormArgs a = row_norm_args(x, norm.weights->weight, rms ? nullptr : &norm.weights->bias, norm.eps, y);
  a.residual = f32(residual);
  if (residual_bias) a.residual_bias = residual_bias->raw(), a.residual_bias_type = weight_type(residual_bias->dtype());
  const GpuTimer timer = timed([&] { return op_cost::add_row_norm(rms ? "add+rms_norm" : "add+layer_norm", x); });
  if (rms) cuda::add_rms_norm(a, ctx_.stream);
  else cuda::add_layer_norm(a, ctx_.stream);
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y) { elementwise(cuda::Elementwise::Add, a, &b, y); }
void CudaBackend::silu_mul(const Tensor& g, const Tensor& u, Tensor& y) { elementwise(cuda::Elementwise::SiluMul, g, &u, y); }
void CudaBackend::gelu(const Tensor& x, GeluKind kind, Tensor& y) {
  elementwise(kind == GeluKind::Tanh ? cuda::Elementwise::GeluTanh : cuda::Elementwise::GeluErf, x, nullptr, y);
}

// y is f32, or a 16-bit GEMM operand (an activation slot: Projection::activated, alloc_operand).
void CudaBackend::elementwise(cuda::Elementwise op, const Tensor& a, const Tensor* b, Tensor& y) {
  if (y.numel() != a.numel() || (b && b->numel() != a.numel())) fail("elementwise: sizes differ");
  static const char* const names[] = {"add", "silu_mul", "gelu_tanh", "gelu_erf"};
  const GpuTimer timer = timed([&] { return op_cost::elementwise(names[int(op)], a, b ? 2 : 1, y); });
  void* out = y.dtype() == DType::F32 ? static_cast<void*>(f32(y)) : y.raw();
  cuda::elementwise({.op = op, .a = f32(a), .b = b ? f32(*b) : nullptr, .y = out, .y_type = weight_type(y.dtype()),
                     .rows = 1, .cols = a.numel(), .in_stride = a.numel()},
                    ctx_.stream);
}

void CudaBackend::embed(const LinearWeights& table, std::span<const int32_t> ids, Tensor& y) {
  const std::vector<int64_t> wide(ids.begin(), ids.end());
  for (int64_t id : wide)
    if (id < 0 || id >= table.rows()) fail("embed: token id ", id, " is outside the embedding table");
  embed_at(table, indices(wide), y);
}

// The ids are not checked here (they are on the device); embed checks them, and recorded decode steps get them
// from the sampler, which picks inside the vocabulary.
void CudaBackend::embed_at(const LinearWeights& table, const Tensor& ids, Tensor& y) {
  if (y.numel() != ids.numel() * table.cols()) fail("embed: output shape ", shape_to_string(y.shape()));
  const GpuTimer timer = timed([&] { return op_cost::embed(table, std::size_t(ids.numel())); });
  if (table.quantised()) {
    cuda::gather_quantized_rows(quant_matrix(table), ids.data<int64_t>(), f32(y), ids.numel(), ctx_.stream);
    return;
  }
  cuda::gather_rows(table.weight.raw(), weight_type(table.weight.dtype()), ids.data<int64_t>(), f32(y), ids.numel(),
                    table.cols(), ctx_.stream);
}

void CudaBackend::patchify(const Tensor& image, const PatchLayout& p, Tensor& out) {
  check_patchify(image, p, out);
  const int64_t h = image.dim(0), w = image.dim(1), ps = p.patch, m = p.merge, tp = p.temporal;
  Tensor pixels = ctx_.device_tensor(DType::U8, image.shape(), pool::Owner::Workspace);
  ctx_.stage(pixels.raw(), image.raw(), image.nbytes());
  const GpuTimer timer = timed([&] { return op_cost::make("patchify", double(image.nbytes() + out.nbytes()), 0); });
  cuda::PatchParams params{h, w, ps, tp, m, {p.mean[0], p.mean[1], p.mean[2]}, {p.std[0], p.std[1], p.std[2]}};
  cuda::patchify(pixels.data<uint8_t>(), params, f32(out), ctx_.stream);
}

void CudaBackend::rope(Tensor& x, const Tensor& cos, const Tensor& sin) {
  const GpuTimer timer = timed([&] { return op_cost::rope(x, cos); });
  cuda::rope(f32(x), f32(cos), f32(sin), x.dim(0), x.dim(1), x.dim(2), ctx_.stream);
}

// Rows along the first dimension (a cache row is [kv heads, head_dim]): copied as they are between tensors of one
// type (a kept conversation's cache), or f32 rows narrowed into a bf16 cache (the unfused append).
void CudaBackend::copy_rows(const Tensor& src, Tensor& dst, int64_t row) {
  const int64_t rows = src.dim(0), width = src.numel() / std::max<int64_t>(1, rows);
  if (row < 0 || row + rows > dst.dim(0) || dst.numel() / std::max<int64_t>(1, dst.dim(0)) != width)
    fail("copy_rows: ", shape_to_string(src.shape()), " does not fit ", shape_to_string(dst.shape()), " at row ", row);
  const GpuTimer timer = timed([&] { return op_cost::rows("copy_rows", src, 2); });
  if (src.dtype() == dst.dtype()) {
    const std::size_t row_bytes = dst.nbytes() / std::size_t(dst.dim(0));
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst.raw()) + std::size_t(row) * row_bytes, src.raw(), src.nbytes(),
                               cudaMemcpyDeviceToDevice, ctx_.stream));
    return;
  }
  const KvData to = kv_data(dst);
  cuda::copy_rows_to({.src = f32(src), .dst = to.data, .dst_bf16 = to.bf16, .first = row, .count = rows, .width = width},
                     ctx_.stream);
}

// The position is on the device: the caller keeps it below dst rows - src rows (the KV cache's capacity).
void CudaBackend::copy_rows_at(const Tensor& src, Tensor& dst, const Tensor& row) {
  const int64_t rows = src.dim(0), width = src.numel() / std::max<int64_t>(1, rows);
  if (dst.numel() / std::max<int64_t>(1, dst.dim(0)) != width) fail("copy_rows_at: row sizes differ");
  const GpuTimer timer = timed([&] { return op_cost::rows("copy_rows", src, 2); });
  const KvData to = kv_data(dst);
  cuda::copy_rows_to({.src = f32(src),
                      .dst = to.data,
                      .dst_bf16 = to.bf16,
                      .row_on_device = row.data<int64_t>(),
                      .count = rows,
                      .width = width},
                     ctx_.stream);
}

void CudaBackend::add_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) { scatter(x, src, rows, true); }
void CudaBackend::set_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) { scatter(x, src, rows, false); }

// The taps' rows and weights go up in one staged copy (a 448x448 image: 784 rows, 25 KB).
void CudaBackend::add_blended_rows(Tensor& x, const Tensor& table, const RowBlend& blend) {
  check_blend(x, table, blend);
  const std::size_t taps = blend.rows.size();
  Tensor staged = ctx_.device_tensor(DType::I32, {2 * int64_t(taps)}, pool::Owner::Workspace);
  ctx_.stage(staged.raw(), blend.rows.data(), taps * sizeof(int32_t));
  ctx_.stage(staged.data<int32_t>() + taps, blend.weights.data(), taps * sizeof(float));
  const GpuTimer timer = timed([&] { return op_cost::rows("add_blended_rows", x, 2 + RowBlend::kTaps); });
  cuda::add_blended_rows({.x = f32(x),
                          .table = table.raw(),
                          .table_type = weight_type(table.dtype()),
                          .rows = staged.data<int32_t>(),
                          .weights = reinterpret_cast<const float*>(staged.data<int32_t>() + taps),
                          .count = rows_of(x),
                          .width = last_dim(x)},
                         ctx_.stream);
}

void CudaBackend::greedy_pick(const Tensor& logits, int64_t vocabulary, Tensor& pick) {
  check_greedy_pick(logits, vocabulary, pick);
  if (logits.device() != Device::CUDA) fail("greedy_pick: the logits must be on the GPU");
  const GpuTimer timer = timed([&] { return op_cost::make("greedy_pick", double(vocabulary) * 4, 0); });
  cuda::greedy_pick({.logits = logits.data<float>(), .count = vocabulary, .pick = pick.data<int64_t>(),
                     .workspace = greedy_pick_workspace_.raw()},
                    ctx_.overlapped_launches, ctx_.stream);
}

static_assert(cuda::kTopKMax == TopKSpec::kMaxTopK && cuda::kTopKMaxCandidates == TopKSpec::kMaxCandidates,
              "the kernel's bounds are the op's");

void CudaBackend::top_k_candidates(const Tensor& logits, const TopKSpec& spec, Tensor& out) {
  check_top_k_candidates(logits, spec, out);
  if (logits.device() != Device::CUDA) fail("top_k_candidates: the logits must be on the GPU");
  if (spec.vocabulary > cuda::top_k_candidates_max_count())  // limits() says so: the caller samples on the host
    fail("top_k_candidates: ", spec.vocabulary, " logits, more than the kernel takes (", cuda::top_k_candidates_max_count(), ")");
  const bool draws = spec.drawn != nullptr;
  const GpuTimer timer = timed([&] {
    return op_cost::make(draws ? "top_k_candidates+draw" : "top_k_candidates", double(spec.vocabulary) * 4, 0);
  });
  cuda::top_k_candidates({.logits = logits.data<float>(), .count = spec.vocabulary, .top_k = int(spec.top_k),
                          .temperature = spec.temperature, .out = out.data<int64_t>(),
                          .workspace = top_k_workspace_.raw(),
                          .drawn = draws ? spec.drawn->data<int64_t>() : nullptr,
                          .state = draws ? reinterpret_cast<uint64_t*>(spec.draw_state->data<int64_t>()) : nullptr,
                          .top_p = spec.top_p,
                          .give_up = sampling_faults_.candidates_do_not_fit,
                          .skipped_draws = sampling_faults_.draws_one_late ? 1 : 0},
                         ctx_.overlapped_launches, ctx_.stream);
}

void CudaBackend::scatter(Tensor& x, const Tensor& src, std::span<const int64_t> rows, bool accumulate) {
  if (last_dim(src) != last_dim(x) || rows_of(src) != int64_t(rows.size())) fail("scatter: shapes do not fit");
  for (int64_t r : rows)
    if (r < 0 || r >= rows_of(x)) fail("scatter: row ", r, " out of range");
  const Tensor dev_rows = indices(rows);
  const GpuTimer timer = timed([&] { return op_cost::rows(accumulate ? "add_rows" : "set_rows", src, accumulate ? 3 : 2); });
  cuda::scatter_rows(f32(x), f32(src), dev_rows.data<int64_t>(), int64_t(rows.size()), last_dim(x), accumulate,
                     ctx_.stream);
}

}  // namespace qvl
