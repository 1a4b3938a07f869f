#pragma once
// A projection site of the model as one descriptor: an input, an optional norm the product reads through (the
// prologue), one to three weight matrices of the same input width, and what becomes of the products (the epilogue).
// The model states *what* each site computes, once; the backend decides *how* (Backend::project: fused kernels
// where its Fusions allow and the shape fits). project_unfused composes the same result from the basic ops: it is
// the reference every fused path is tested against, and what a backend without fused kernels runs.
//
// The norm slot: the model owns a tensor slot for normed rows (`normed`), the backend fills it (allocating it on
// first use, in the type its products read). A Residual epilogue may close with the norm the next projection reads
// (`then_norm`): the backend then either writes the slot, or, where it folds that norm into the next projection's
// kernel (decode GEMVs on a GPU), leaves it — and the next projection, whose prologue names the same norm with
// normed_ready, folds it. Either way the next projection reads norm(residual).
#include <array>

#include "backend/weight_format.h"
#include "core/tensor.h"

namespace qvl {

class Backend;

enum class GeluKind { Tanh, Erf };

// A row norm. RMSNorm: y = w ⊙ x / rms(x); LayerNorm: y = w ⊙ (x − mean) / std + b. It runs over groups of
// weight.numel() values, so one input row may hold several (the vision merger normalises each of the four patches of
// a merged row).
struct RowNorm {
  enum class Kind { None, Rms, Layer } kind = Kind::None;
  const NormWeights* weights = nullptr;
  float eps = 0;
  static RowNorm rms(const NormWeights& w, float eps) { return {Kind::Rms, &w, eps}; }
  static RowNorm layer(const NormWeights& w, float eps) { return {Kind::Layer, &w, eps}; }
  explicit operator bool() const { return kind != Kind::None; }
  int64_t width() const { return weights->weight.numel(); }
};

enum class Epilogue {
  Store,     // outputs[i] = in · weights[i]ᵀ (+ bias)
  Residual,  // residual += in · weights[0]ᵀ (+ bias); outputs[0] may hold the product; then_norm may follow
  SwiGLU,    // outputs[0] = silu(in · gateᵀ) ⊙ (in · upᵀ), weights = {gate, up}; outputs[1] may hold the up product
  Gelu,      // outputs[0] = gelu(in · weights[0]ᵀ + bias)
};

struct Projection {
  const Tensor* input = nullptr;  // [rows, in] (any shape whose last dimension is `in`)
  RowNorm norm;                   // prologue: the products read norm(input)
  Tensor* normed = nullptr;       // the slot for norm(input)
  bool normed_ready = false;      // the previous projection's then_norm was this norm of this input
  std::array<const LinearWeights*, 3> weights{};
  std::array<Tensor*, 3> outputs{};
  int count = 0;
  Epilogue epilogue = Epilogue::Store;
  GeluKind gelu_kind = GeluKind::Tanh;
  Tensor* residual = nullptr;  // Residual
  RowNorm then_norm;           // Residual: norm(residual) for the next projection
  Tensor* then_normed = nullptr;
  // Store with q, k, v: q and k (outputs 0 and 1, [rows, heads, head_dim]) rotated after their biases by RoPE with
  // tables [rows, head_dim] (Backend::rope), as the vision tower's attention reads them. nullptr: not rotated.
  const Tensor* rope_cos = nullptr;
  const Tensor* rope_sin = nullptr;
  // SwiGLU, Gelu: the activation goes into this slot instead of outputs[0] (the products still use outputs). The
  // model owns the slot and the next projection reads it; the backend fills it on first use (activation_slot): in
  // the type that projection's products read where it has one (Backend::alloc_operand: the 16-bit operand of a
  // cuBLAS product, so the activation is narrowed as it is written, not in a pass of its own), else it is outputs[0].
  Tensor* activated = nullptr;

  // outputs[i] = input · weights[i]ᵀ (+ bias), for one to three matrices.
  static Projection of(const Tensor& input, const LinearWeights& w, Tensor& out);
  static Projection of(const Tensor& input, const LinearWeights& q, const LinearWeights& k, const LinearWeights& v,
                       Tensor& q_out, Tensor& k_out, Tensor& v_out);
  // silu(input · gateᵀ) ⊙ (input · upᵀ) into y; `scratch` (y's shape) may hold the up product.
  static Projection swiglu(const Tensor& input, const LinearWeights& gate, const LinearWeights& up, Tensor& y,
                           Tensor& scratch);
  // The products read norm(input), held in `slot`; `ready`: made by the previous projection's then_norm.
  Projection& reading_norm(RowNorm n, Tensor& slot, bool ready = false);
  // The product added to `residual` (`scratch`, residual's shape, may hold it), optionally followed by `next`, the
  // norm the next projection reads, into `slot`.
  static Projection add_to(Tensor& residual, const Tensor& input, const LinearWeights& w, Tensor& scratch);
  Projection& then(RowNorm next, Tensor& slot);
  Projection& gelu(GeluKind kind);
  Projection& into_operand(Tensor& slot);  // SwiGLU, Gelu: the activation into `slot` (activated)
  Projection& rotating(const Tensor& cos, const Tensor& sin);
  // A descriptor keeps pointers to its tensors: a temporary input would be gone before the backend reads it.
  static Projection of(Tensor&&, const LinearWeights&, Tensor&) = delete;
  static Projection of(Tensor&&, const LinearWeights&, const LinearWeights&, const LinearWeights&, Tensor&, Tensor&,
                       Tensor&) = delete;
  static Projection swiglu(Tensor&&, const LinearWeights&, const LinearWeights&, Tensor&, Tensor&) = delete;
  static Projection add_to(Tensor&, Tensor&&, const LinearWeights&, Tensor&) = delete;

  int64_t rows() const;  // rows of the input
};

// Throws qvl::Error naming the first shape that does not fit (all backends check the same way).
void check_projection(const Projection& p);

// The unfused reference: the norm (unless ready), each product as a linear, the epilogue as basic ops.
void project_unfused(Backend& be, const Projection& p);

// The pieces of the reference, for backends that fuse some steps and run the others as the reference does.
// RoPE on q and k where the projection rotates them (rope_cos), after products computed without it.
void rotate_unfused(Backend& be, const Projection& p);
// The tensor the products read: the input, or the norm slot (normalised here unless normed_ready).
const Tensor& unfused_prologue(Backend& be, const Projection& p);
// The norm slot `slot` for rows shaped like `like`, allocated on first use (Backend::alloc_normed, for p's products).
Tensor& norm_slot(Backend& be, Tensor& slot, const Tensor& like, const Projection& p);
// Where a SwiGLU or GELU projection's activation goes: its `activated` slot, filled on first use (with a tensor from
// Backend::alloc_operand, or with outputs[0] itself where that gives none), or outputs[0] without a slot. Backends
// call it before any of their paths, so the slot is filled whichever runs.
Tensor& activation_slot(Backend& be, const Projection& p);
// y = norm(x) over the norm's groups, into the slot y (norm_slot).
void normalise(Backend& be, const RowNorm& norm, const Tensor& x, Tensor& y, const Projection& reader);

}  // namespace qvl
