// Projections on the CUDA backend. Few rows (decode): the memory-bound GEMV, with the fused variants (q+k+v in one
// launch, gate/up with SwiGLU, the input RMSNorm folded in, the residual add in the output); many rows (prefill,
// vision): cuBLAS on tensor cores (native profile; matrices stored together run as one product) or our tiled f32
// GEMM (SM61), with the bias riding in the kernel after the GEMM (GELU, residual add + norm) where cuBLAS would add
// it with a pass of its own. Which of these runs follows the backend's Fusions; with every switch off, project() runs what project_unfused runs.
#include <algorithm>
#include <array>

#include "backend/op_costs.h"
#include "bias_gelu.cuh"
#include "bias_rope.cuh"
#include "common.cuh"
#include "convert.cuh"
#include "core/error.h"
#include "cuda_backend.h"
#include "elementwise.cuh"
#include "gemm_tiled.cuh"
#include "gemv.cuh"
#include "gemv_qkv.cuh"
#include "qk_norm_rope_append.cuh"
#include "quantize_rows.cuh"
#include "gemv_swiglu.cuh"
#include "split_columns.cuh"

namespace qvl {

cuda::GemvNorm gemv_norm(const RowNorm& norm, bool fold) {
  if (!fold) return {};
  const Tensor& w = norm.weights->weight;
  return {w.raw(), weight_type(w.dtype()), norm.eps};
}

void CudaBackend::linear(const Tensor& x, const LinearWeights& w, Tensor& y) { linear_into(x, w, w.bias_or_null(), y); }

// y = x · wᵀ (+ bias): the GEMV for few rows, else cuBLAS or the tiled GEMM. `bias` is w's, or null where the caller
// adds it in a kernel of its own.
void CudaBackend::linear_into(const Tensor& x, const LinearWeights& lw, const Tensor* bias, Tensor& y) {
  const Tensor& w = lw.weight;
  const int64_t k = last_dim(x), m = rows_of(x), n = w.dim(0);
  if (w.rank() != 2 || lw.cols() != k || y.numel() != m * n)
    fail("linear: shapes x ", shape_to_string(x.shape()), " w ", shape_to_string(w.shape()), " (", n, "x", lw.cols(),
         " ", format_traits(lw.format).name, ") y ", shape_to_string(y.shape()));
  if (lw.quantised()) return linear_quantised(x, lw, bias, y);
  const GpuTimer timer = timed([&] { return op_cost::linear(x, lw, y); });
  ctx_.maybe_inject_fault();
  const cuda::WeightType wt = weight_type(w.dtype()), bt = bias ? weight_type(bias->dtype()) : cuda::WeightType::F32;
  const void* b = bias ? bias->raw() : nullptr;
  const bool operand = x.dtype() != DType::F32;  // written by a norm as cuBLAS's operand (alloc_normed)
  if (operand && (x.dtype() != w.dtype() || !runs_cublas(m)))
    fail("linear: ", dtype_name(x.dtype()), " activations are for cuBLAS products with ", dtype_name(x.dtype()),
         " weights; here ", dtype_name(w.dtype()), " weights, ", m, " rows");
  if (!operand) {
    const cuda::MatmulArgs args{.x = f32(x), .w = w.raw(), .w_type = wt, .bias = b, .bias_type = bt, .y = f32(y),
                                .m = m, .n = n, .k = k};
    if (m <= ctx_.profile->gemv_max_rows && cuda::gemv(args, false, ctx_.overlapped_launches, ctx_.stream)) return;
    if (!runs_cublas(m)) {  // the tiled kernel: no conversion pass, the bias in its epilogue
      cuda::gemm_tiled(args, ctx_.stream);
      return;
    }
  }
  cublas_product(x, w.raw(), w.dtype(), f32(y), n);
  if (b) cuda::add_bias(f32(y), b, bt, m, n, ctx_.stream);
}

// y[m, n] = x · wᵀ on cuBLAS, f32 out. 16-bit weights read the activations in their type: converted here from f32,
// or already so (an operand slot a norm or an activation wrote).
void CudaBackend::cublas_product(const Tensor& x, const void* w, DType w_type, float* y, int64_t n) {
  const int64_t m = rows_of(x), k = last_dim(x);
  const bool operand = x.dtype() != DType::F32;
  Tensor narrow = operand || w_type == DType::F32 ? Tensor()
                                                  : ctx_.device_tensor(w_type, {m, k}, pool::Owner::Workspace);
  ctx_.cublas->run(operand ? nullptr : f32(x), operand ? const_cast<void*>(x.raw()) : narrow.raw(), w,
                   weight_type(w_type), y, m, n, k);
}

namespace {

// Whether p's matrices lie one after another in memory (CudaBackend::upload_linears, or widened so from q8/q4 by
// project_dequantised), 16-bit and unquantised, without biases, each as wide as `in`: then one product of their
// summed rows computes them all.
bool packed_weights(const Projection& p, const Tensor& in) {
  const Tensor& first = p.weights[0]->weight;
  if (first.dtype() != DType::BF16 && first.dtype() != DType::F16) return false;
  if (in.dtype() != DType::F32 && in.dtype() != first.dtype()) return false;
  const char* next = static_cast<const char*>(first.raw());
  for (int i = 0; i < p.count; ++i) {
    const LinearWeights& w = *p.weights[std::size_t(i)];
    if (w.quantised() || w.bias_or_null() || w.weight.dtype() != first.dtype() || w.cols() != last_dim(in) ||
        w.weight.raw() != next)
      return false;
    next += w.weight.nbytes();
  }
  return true;
}

}  // namespace

// Many rows, matrices stored one after another (the decoder's q, k and v): one cuBLAS product of their summed width
// into a workspace, its columns then copied to each output (or, inside project_then_heads, read there by the
// attention prologue). Queueing a prefill is bound by the host on the H100
// machine (cuBLAS's host path 60% of the decoder's queueing, sampled; 8-12 µs a call,
// tools/microbench/cublas_host_cost.cu): two calls fewer a layer for a 4 µs copy at 237 rows. false: nothing ran.
bool CudaBackend::gemm_packed(const Projection& p, const Tensor& in) {
  const int64_t m = rows_of(in);
  if (p.count < 2 || !runs_cublas(m) || !packed_weights(p, in)) return false;
  cuda::SplitColumns split{.packed = nullptr, .rows = m, .parts = p.count, .out = {}, .cols = {}};
  int64_t n = 0;
  for (int i = 0; i < p.count; ++i) {
    if (p.outputs[std::size_t(i)]->numel() != m * p.weights[std::size_t(i)]->rows()) return false;
    split.out[i] = f32(*p.outputs[std::size_t(i)]);
    split.cols[i] = p.weights[std::size_t(i)]->rows();
    n += split.cols[i];
  }
  Tensor packed = ctx_.device_tensor(DType::F32, {m, n}, pool::Owner::Workspace);
  {
    const GpuTimer timer = timed([&] { return op_cost::linear_together("linear packed", in, p.weights, p.count); });
    ctx_.maybe_inject_fault();
    cublas_product(in, p.weights[0]->weight.raw(), p.weights[0]->weight.dtype(), f32(packed), n);
  }
  // The attention prologue after it (project_then_heads), where it can read the packed rows: its q, k and v are
  // this projection's outputs, which then stay unwritten (the prologue's results are q and the cache rows).
  if (const HeadNormRopeAppend* op = heads_after_;
      op && fusions_.qk_norm_rope_append && p.count == 3 && !p.rope_cos && op->q == p.outputs[0] &&
      op->k == p.outputs[1] && op->v == p.outputs[2]) {
    check_head_norm_rope_append(*op);
    cuda::QkNormRopeAppendArgs args = head_args(*op);
    if (cuda::qk_norm_rope_append_strided(args)) {
      const int64_t q_width = split.cols[0], kv_width = split.cols[1];
      args.q_out = args.q;
      args.q = f32(packed);
      args.k = f32(packed) + q_width;
      args.v = f32(packed) + q_width + kv_width;
      args.q_stride = args.kv_stride = n;
      const GpuTimer timer = timed([&] { return op_cost::qk_norm_rope_append(*op->q, *op->k, *op->cos); });
      cuda::qk_norm_rope_append(args, ctx_.overlapped_launches, ctx_.stream);
      heads_after_ = nullptr;
      return true;
    }
  }
  const GpuTimer timer = timed([&] { return op_cost::elementwise("split columns", packed, 1, packed); });
  split.packed = f32(packed);
  cuda::split_columns(split, ctx_.stream);
  return true;
}

// Many rows, gate and up stored one after another and their outputs too (the decoder allocates them so): one cuBLAS
// product of twice the width writes both outputs' bytes as [m, 2·inter] rows, and the SiLU·mul reads them there.
// false: nothing ran.
bool CudaBackend::gemm_swiglu_packed(const Projection& p, const Tensor& in) {
  const int64_t m = rows_of(in), n = p.weights[0]->rows();
  Tensor &gate = *p.outputs[0], &up = *p.outputs[1];
  if (!runs_cublas(m) || !packed_weights(p, in) || p.weights[1]->rows() != n || gate.dtype() != DType::F32 ||
      up.dtype() != DType::F32 || gate.numel() != m * n || up.numel() != m * n ||
      up.raw() != static_cast<const char*>(gate.raw()) + gate.nbytes())
    return false;
  Tensor& out = activation_slot(*this, p);
  const char *packed = static_cast<const char*>(gate.raw()), *packed_end = packed + 2 * gate.nbytes(),
             *slot = static_cast<const char*>(out.raw());
  if (slot < packed_end && packed < slot + out.nbytes()) return false;  // the slot would overwrite rows still read
  {
    const GpuTimer timer = timed([&] { return op_cost::linear(in, *p.weights[0], gate, "linear gate+up packed", 2); });
    ctx_.maybe_inject_fault();
    cublas_product(in, p.weights[0]->weight.raw(), p.weights[0]->weight.dtype(), f32(gate), 2 * n);
  }
  const GpuTimer timer = timed([&] { return op_cost::elementwise("silu_mul", gate, 2, out); });
  cuda::elementwise({.op = cuda::Elementwise::SiluMul, .a = f32(gate), .b = f32(gate) + n, .y = out.raw(),
                     .y_type = weight_type(out.dtype()), .rows = m, .cols = n, .in_stride = 2 * n},
                    ctx_.stream);
  return true;
}

// Whether linear() runs cuBLAS for m rows, and so adds the bias with a kernel of its own after the product (the
// GEMV and the tiled GEMM add it in their epilogue).
bool CudaBackend::runs_cublas(int64_t m) const {
  return ctx_.profile->gemm == cuda::GemmKernel::Cublas && m > ctx_.profile->gemv_max_rows;
}

// Whether an RMSNorm runs inside the GEMV that reads it (decode rows, the rms_norm+linear fusion). Asked with the
// same rows for a projection's closing norm and for the next projection's input norm, so the closing norm is left
// out exactly when the next projection folds it in. Quantised products fold the norm into the activations'
// quantisation, at any width (quantize_rows reads the rest of a wide row's squares from memory).
bool CudaBackend::folds_norm(const RowNorm& norm, int64_t rows) const {
  return norm.kind == RowNorm::Kind::Rms && fusions_.norm_into_projection && rows <= ctx_.profile->gemv_max_rows;
}

void CudaBackend::project(const Projection& p) {
  check_projection(p);
  activation_slot(*this, p);  // filled before any path runs (the GEMVs and the quantised products leave it outputs[0])
  if (p.weights[0]->quantised()) return project_quantised(p);
  project_floats(p);
}

// The projection with float weights (stored so, or dequantised for many rows: project_dequantised).
void CudaBackend::project_floats(const Projection& p) {
  const bool fold = p.norm && folds_norm(p.norm, p.rows());
  if (fold) {  // the norm inside the GEMV that reads the rows: q+k+v and gate/up at decode
    if (p.epilogue == Epilogue::Store && p.count == 3 && !narrowed_outputs(p) && gemv_qkv(p, *p.input, true))
      return rotate_unfused(*this, p);
    if (p.epilogue == Epilogue::SwiGLU && gemv_swiglu(p, *p.input, true)) return;
  }
  // Otherwise the products read the norm slot: made by the previous projection's closing norm, or here (always where
  // the norm folds: the previous projection then left it out).
  const Tensor* in = p.input;
  if (p.norm) {
    if (fold || !p.normed_ready || !p.normed->raw()) normalise(*this, p.norm, *p.input, *p.normed, p);
    in = p.normed;
  }
  products(p, *in, fold);
}

// The matrices and the epilogue, reading `in`. fold: the projection folds its norm, so its products are fused
// whatever the q+k+v and SwiGLU switches say (as the GEMVs with the norm folded in would have been).
void CudaBackend::products(const Projection& p, const Tensor& in, bool fold) {
  const LinearWeights& w0 = *p.weights[0];
  switch (p.epilogue) {
    case Epilogue::Store:
      if (narrowed_outputs(p)) return products_narrowed(p, in, fold);
      if (p.count == 3 && (fusions_.qkv_projection || fold) && gemv_qkv(p, in, false)) return rotate_unfused(*this, p);
      if (fusions_.qkv_projection && gemm_packed(p, in)) return rotate_unfused(*this, p);
      // Many rows, one shape: one launch, then the biases and the rotation in one pass.
      if (p.count == 3 && fusions_.qkv_projection && gemm_batched(p, in)) return;
      for (int i = 0; i < p.count; ++i) linear(in, *p.weights[std::size_t(i)], *p.outputs[std::size_t(i)]);
      return rotate_unfused(*this, p);
    case Epilogue::SwiGLU:
      if ((fusions_.swiglu_projection || fold) && gemv_swiglu(p, in, false)) return;
      if (fusions_.swiglu_projection && gemm_swiglu_packed(p, in)) return;
      linear(in, w0, *p.outputs[0]);
      linear(in, *p.weights[1], *p.outputs[1]);
      silu_mul(*p.outputs[0], *p.outputs[1], activation_slot(*this, p));  // maybe the down GEMM's operand
      return;
    case Epilogue::Gelu: {
      Tensor& y = *p.outputs[0];
      Tensor& out = activation_slot(*this, p);  // maybe the fc2 GEMM's operand
      const Tensor* bias = w0.bias_or_null();
      // With cuBLAS the bias is a kernel of its own after the GEMM: here it rides along with the GELU instead (the
      // same bits: bias_gelu.cu). The GEMV and the tiled GEMM add it in their epilogue already.
      if (!fusions_.linear_gelu || !bias || !runs_cublas(rows_of(in))) {
        linear(in, w0, y);
        gelu(y, p.gelu_kind, out);
        return;
      }
      linear_into(in, w0, nullptr, y);
      const GpuTimer timer = timed([&] { return op_cost::elementwise("bias+gelu", y, 1, out); });
      cuda::bias_gelu({.y = f32(y), .bias = bias->raw(), .bias_type = weight_type(bias->dtype()), .out = out.raw(),
                       .out_type = weight_type(out.dtype()), .rows = rows_of(y), .cols = last_dim(y),
                       .tanh_form = p.gelu_kind == GeluKind::Tanh},
                      ctx_.stream);
      return;
    }
    case Epilogue::Residual:
      residual_epilogue(p, in);
      return;
  }
}

bool CudaBackend::narrowed_outputs(const Projection& p) {
  return std::any_of(p.outputs.begin(), p.outputs.begin() + p.count, [](const Tensor* y) { return y->dtype() != DType::F32; });
}

// Outputs in 16 bits (alloc_keys_values: the vision tower's k and v for the tensor-core attention): the batched
// product's bias + RoPE kernel writes them where products() would run it; any other product runs through_f32.
void CudaBackend::products_narrowed(const Projection& p, const Tensor& in, bool fold) {
  if (p.count == 3 && fusions_.qkv_projection && !packed_weights(p, in) && gemm_batched(p, in)) return;
  through_f32(p, [&](const Projection& wide) { products(wide, in, fold); });
}

// `run` with f32 workspaces in place of p's 16-bit outputs, then those narrowed into them (the rounding of a kernel
// that writes them itself).
void CudaBackend::through_f32(const Projection& p, const std::function<void(const Projection&)>& run) {
  Projection wide = p;
  std::array<Tensor, 3> results;
  for (std::size_t i = 0; i < std::size_t(p.count); ++i)
    if (p.outputs[i]->dtype() != DType::F32) {
      results[i] = ctx_.device_tensor(DType::F32, p.outputs[i]->shape(), pool::Owner::Workspace);
      wide.outputs[i] = &results[i];
    }
  run(wide);
  for (std::size_t i = 0; i < std::size_t(p.count); ++i)
    if (results[i].raw()) {
      Tensor& y = *p.outputs[i];
      const GpuTimer timer = timed([&] { return op_cost::elementwise("narrow", results[i], 1, y); });
      cuda::narrow_f32(f32(results[i]), y.raw(), weight_type(y.dtype()), y.numel(), ctx_.stream);
    }
}

// residual += in · wᵀ (+ bias), then the closing norm if any: the add and the norm in one kernel (with the GEMM's
// bias where cuBLAS leaves it out), or the add in the GEMV (decode, where the next projection folds the norm), or
// the unfused sequence.
void CudaBackend::residual_epilogue(const Projection& p, const Tensor& in) {
  const LinearWeights& w = *p.weights[0];
  Tensor &x = *p.residual, &scratch = *p.outputs[0];
  const RowNorm& next = p.then_norm;
  const int64_t rows = rows_of(x);  // the rows the next projection reads: the same question folds_norm asks there
  const bool whole_rows = next && next.width() == last_dim(x);
  const bool next_folds = next && folds_norm(next, rows);
  const auto slot = [&]() -> Tensor& { return norm_slot(*this, *p.then_normed, x, p); };
  if (whole_rows && next.kind == RowNorm::Kind::Layer && fusions_.add_layer_norm) {
    const Tensor* bias = w.bias_or_null();
    const bool bias_after = bias && runs_cublas(rows);
    linear_into(in, w, bias_after ? nullptr : bias, scratch);
    add_norm(x, scratch, bias_after ? bias : nullptr, next, slot());
    return;
  }
  if (whole_rows && next.kind == RowNorm::Kind::Rms && !next_folds && fusions_.add_rms_norm) {
    linear(in, w, scratch);
    add_norm(x, scratch, nullptr, next, slot());
    return;
  }
  if (!(fusions_.norm_into_projection && gemv_accumulate(p, in))) {
    linear(in, w, scratch);
    add(x, scratch, x);
  }
  if (next && !next_folds) normalise(*this, next, x, slot(), p);
}


// x += in · wᵀ (+ bias) in the GEMV's epilogue. false: nothing ran (many rows, or a shape the kernel does not take).
bool CudaBackend::gemv_accumulate(const Projection& p, const Tensor& in) {
  const LinearWeights& lw = *p.weights[0];
  const Tensor& w = lw.weight;
  const Tensor* bias = lw.bias_or_null();
  Tensor& x = *p.residual;
  const int64_t k = last_dim(in), m = rows_of(in), n = w.dim(0);
  if (in.dtype() != DType::F32 || m > ctx_.profile->gemv_max_rows ||
      !cuda::gemv_fits(f32(in), w.raw(), weight_type(w.dtype()), m, k))
    return false;
  const GpuTimer timer = timed([&] { return op_cost::linear(in, lw, x, "linear+add"); });
  ctx_.maybe_inject_fault();
  const cuda::MatmulArgs args{.x = f32(in),
                              .w = w.raw(),
                              .w_type = weight_type(w.dtype()),
                              .bias = bias ? bias->raw() : nullptr,
                              .bias_type = bias ? weight_type(bias->dtype()) : cuda::WeightType::F32,
                              .y = f32(x),
                              .m = m,
                              .n = n,
                              .k = k};
  cuda::gemv(args, true, ctx_.overlapped_launches, ctx_.stream);
  return true;
}

// Many rows: the projection's matrices (one shape, 16-bit, not quantised: the vision tower's q, k and v) in one cuBLAS
// launch, each into its own output, then their biases in one launch (with the q/k RoPE where the projection rotates:
// bias_rope.cu, which also writes 16-bit outputs, alloc_keys_values', from the f32 products in the room after their
// values, or in workspaces). The profiled traces on an H200 (2B shapes, 784 rows): three launches of 7 x 8 output tiles for 132
// SMs, 15.4 us each with the bias kernel, against 31.4 us for the batch with its biases. (The decoder's k and v, and
// gate and up, batched the same way moved its prefill by nothing beyond the spread; they now run packed:
// gemm_packed, gemm_swiglu_packed.) cuBLAS may choose another kernel for the batch than for one product. false:
// nothing ran.
bool CudaBackend::gemm_batched(const Projection& p, const Tensor& in) {
  const int64_t m = rows_of(in), k = last_dim(in);
  const LinearWeights& first = *p.weights[0];
  const DType wt = first.weight.dtype();
  if (!runs_cublas(m) || (wt != DType::BF16 && wt != DType::F16) || (in.dtype() != DType::F32 && in.dtype() != wt))
    return false;
  const Tensor* some_bias = nullptr;
  for (int i = 0; i < p.count; ++i) {
    const LinearWeights& w = *p.weights[std::size_t(i)];
    if (w.quantised() || w.weight.dtype() != wt || w.rows() != first.rows() || w.cols() != k ||
        p.outputs[std::size_t(i)]->numel() != m * w.rows())
      return false;
    if (const Tensor* b = w.bias_or_null()) {
      if (some_bias && b->dtype() != some_bias->dtype()) return false;
      some_bias = b;
    }
  }
  const int count = p.count;
  // Where each product goes: the output itself (f32), or for a 16-bit output the f32 room after its values (or a
  // workspace), from which the bias + RoPE kernel narrows it.
  std::array<Tensor, 3> workspaces;
  std::array<float*, 3> products{};
  for (std::size_t i = 0; i < std::size_t(count); ++i) {
    const Tensor& y = *p.outputs[i];
    if (y.dtype() != DType::F32 && !p.rope_cos) return false;
    products[i] = y.dtype() == DType::F32 ? f32(y) : product_room(y, workspaces[i]);
  }
  const GpuTimer timer = timed([&] {
    const double outputs = double(count) * double(p.outputs[0]->nbytes());
    return op_cost::make("linear " + std::to_string(count) + "x" + std::to_string(first.rows()) + "x" + std::to_string(k) +
                             " " + std::string(format_traits(first.format).name) + " m>4 batched",
                         double(count) * double(first.weight.nbytes()) + double(in.nbytes()) + outputs,
                         2.0 * double(count) * double(m) * double(first.rows()) * double(k));
  });
  ctx_.maybe_inject_fault();
  Tensor narrow;  // the activations in the weights' type, once for all the products
  if (in.dtype() == DType::F32) {
    narrow = ctx_.device_tensor(wt, {m, k}, pool::Owner::Workspace);
    cuda::narrow_f32(f32(in), narrow.raw(), weight_type(wt), m * k, ctx_.stream);
  }
  const void* operand = narrow.raw() ? narrow.raw() : in.raw();
  std::vector<const void*> pointers;  // weights, activations, outputs
  for (int i = 0; i < count; ++i) pointers.push_back(p.weights[std::size_t(i)]->weight.raw());
  for (int i = 0; i < count; ++i) pointers.push_back(operand);
  for (int i = 0; i < count; ++i) pointers.push_back(products[std::size_t(i)]);
  Tensor on_device = ctx_.device_tensor(DType::I64, {int64_t(pointers.size())}, pool::Owner::Workspace);
  ctx_.stage(on_device.raw(), pointers.data(), pointers.size() * sizeof(void*));
  ctx_.cublas->run_batched(static_cast<const void* const*>(on_device.raw()), count, weight_type(wt), m, first.rows(), k);
  cuda::Biases biases;
  biases.count = count;
  cuda::BiasRopeOutputs results;
  for (std::size_t i = 0; i < std::size_t(count); ++i) {
    biases.y[i] = products[i];
    const Tensor* b = p.weights[i]->bias_or_null();
    biases.bias[i] = b ? b->raw() : nullptr;
    results.out[i] = p.outputs[i]->raw();
    results.type[i] = weight_type(p.outputs[i]->dtype());
  }
  const cuda::WeightType bias_type = some_bias ? weight_type(some_bias->dtype()) : cuda::WeightType::F32;
  if (p.rope_cos) {  // q and k rotated as they get their biases (rope in place after add_biases: the same bits)
    const Tensor& q = *p.outputs[0];
    cuda::add_biases_rope(biases, bias_type, {f32(*p.rope_cos), f32(*p.rope_sin), m, q.dim(1), q.dim(2)}, results,
                          ctx_.stream);
  } else if (some_bias) {
    cuda::add_biases(biases, bias_type, m, first.rows(), ctx_.stream);
  }
  return true;
}

// q, k and v in one GEMV launch, with the input RMSNorm folded in when fold_norm. false: nothing ran.
bool CudaBackend::gemv_qkv(const Projection& p, const Tensor& in, bool fold_norm) {
  const int64_t kx = last_dim(in), m = rows_of(in);
  const Tensor& wq = p.weights[0]->weight;
  if (in.dtype() != DType::F32 || m > ctx_.profile->gemv_max_rows || (fold_norm && p.norm.width() != kx)) return false;
  const Tensor* some_bias = nullptr;
  for (const LinearWeights* w : p.weights)
    if (!some_bias) some_bias = w->bias_or_null();
  cuda::QkvProjection q{};
  for (std::size_t i = 0; i < 3; ++i) {
    const LinearWeights& w = *p.weights[i];
    const Tensor* bias = w.bias_or_null();
    if (w.weight.dtype() != wq.dtype() || (bias && bias->dtype() != some_bias->dtype())) return false;
    q.w[i] = w.weight.raw();
    q.bias[i] = bias ? bias->raw() : nullptr;
    q.y[i] = f32(*p.outputs[i]);
    q.n[i] = w.rows();
  }
  if (!cuda::gemv_qkv_fits(f32(in), q, weight_type(wq.dtype()), m, kx, fold_norm)) return false;
  const GpuTimer timer = timed([&] {
    return op_cost::linear_together(fold_norm ? "rms_norm+linear q+k+v" : "linear q+k+v", in, p.weights, 3);
  });
  ctx_.maybe_inject_fault();
  cuda::gemv_qkv(f32(in), q, weight_type(wq.dtype()), some_bias ? weight_type(some_bias->dtype()) : cuda::WeightType::F32,
                 m, kx, gemv_norm(p.norm, fold_norm), ctx_.overlapped_launches, ctx_.stream);
  return true;
}

// silu(in · gateᵀ) ⊙ (in · upᵀ) in one GEMV launch, with the input RMSNorm folded in when fold_norm.
bool CudaBackend::gemv_swiglu(const Projection& p, const Tensor& in, bool fold_norm) {
  const LinearWeights &gate = *p.weights[0], &up = *p.weights[1];
  Tensor& y = *p.outputs[0];
  const int64_t k = last_dim(in), m = rows_of(in), n = gate.rows();
  const bool fits = in.dtype() == DType::F32 && !gate.bias_or_null() && !up.bias_or_null() &&
                    gate.weight.dtype() == up.weight.dtype() &&
                    m <= ctx_.profile->gemv_max_rows && (!fold_norm || p.norm.width() == k) &&
                    cuda::gemv_swiglu_fits(f32(in), gate.weight.raw(), up.weight.raw(), weight_type(gate.weight.dtype()),
                                           m, k, fold_norm);
  if (!fits) return false;
  const GpuTimer timer = timed([&] {
    return op_cost::linear(in, gate, y, fold_norm ? "rms_norm+linear+swiglu" : "linear+swiglu", 2);
  });
  ctx_.maybe_inject_fault();
  const cuda::MatmulArgs args{
      .x = f32(in), .w = gate.weight.raw(), .w_type = weight_type(gate.weight.dtype()), .y = f32(y), .m = m, .n = n, .k = k};
  cuda::gemv_swiglu(args, up.weight.raw(), gemv_norm(p.norm, fold_norm), ctx_.overlapped_launches, ctx_.stream);
  return true;
}

}  // namespace qvl
