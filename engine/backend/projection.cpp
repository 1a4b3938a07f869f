#include "backend/projection.h"

#include "backend/backend.h"
#include "core/error.h"

namespace qvl {

namespace {

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::Store: return "store";
    case Epilogue::Residual: return "residual";
    case Epilogue::SwiGLU: return "swiglu";
    case Epilogue::Gelu: return "gelu";
  }
  return "?";
}

void check_norm(const RowNorm& n, const Tensor& x, const char* where) {
  if (!n) return;
  if (!n.weights || !n.weights->weight.raw()) fail("projection: the ", where, " norm has no weight");
  const int64_t g = n.width(), width = last_dim(x);
  if (g <= 0 || width % g != 0)
    fail("projection: the ", where, " norm's ", g, " weights do not divide rows of ", width);
  if (n.kind == RowNorm::Kind::Layer && n.weights->bias.numel() != g)
    fail("projection: the ", where, " LayerNorm has ", n.weights->bias.numel(), " biases for ", g, " weights");
}

}  // namespace

Projection Projection::of(const Tensor& input, const LinearWeights& w, Tensor& out) {
  Projection p;
  p.input = &input;
  p.weights[0] = &w;
  p.outputs[0] = &out;
  p.count = 1;
  return p;
}

Projection Projection::of(const Tensor& input, const LinearWeights& q, const LinearWeights& k, const LinearWeights& v,
                          Tensor& q_out, Tensor& k_out, Tensor& v_out) {
  Projection p;
  p.input = &input;
  p.weights = {&q, &k, &v};
  p.outputs = {&q_out, &k_out, &v_out};
  p.count = 3;
  return p;
}

Projection Projection::swiglu(const Tensor& input, const LinearWeights& gate, const LinearWeights& up, Tensor& y,
                              Tensor& scratch) {
  Projection p;
  p.input = &input;
  p.weights = {&gate, &up, nullptr};
  p.outputs = {&y, &scratch, nullptr};
  p.count = 2;
  p.epilogue = Epilogue::SwiGLU;
  return p;
}

Projection Projection::add_to(Tensor& residual, const Tensor& input, const LinearWeights& w, Tensor& scratch) {
  Projection p = of(input, w, scratch);
  p.epilogue = Epilogue::Residual;
  p.residual = &residual;
  return p;
}

Projection& Projection::reading_norm(RowNorm n, Tensor& slot, bool ready) {
  norm = n;
  normed = &slot;
  normed_ready = ready;
  return *this;
}

Projection& Projection::then(RowNorm next, Tensor& slot) {
  then_norm = next;
  then_normed = &slot;
  return *this;
}

Projection& Projection::gelu(GeluKind kind) {
  epilogue = Epilogue::Gelu;
  gelu_kind = kind;
  return *this;
}

Projection& Projection::into_operand(Tensor& slot) {
  activated = &slot;
  return *this;
}

Projection& Projection::rotating(const Tensor& cos, const Tensor& sin) {
  rope_cos = &cos;
  rope_sin = &sin;
  return *this;
}

int64_t Projection::rows() const { return rows_of(*input); }

void check_projection(const Projection& p) {
  if (!p.input) fail("projection: no input");
  const int expected = p.epilogue == Epilogue::SwiGLU ? 2 : p.epilogue == Epilogue::Store ? p.count : 1;
  if (p.count < 1 || p.count > 3 || p.count != expected)
    fail("projection: ", p.count, " matrices for a ", epilogue_name(p.epilogue), " epilogue");
  const int64_t k = last_dim(*p.input), m = p.rows();
  for (int i = 0; i < p.count; ++i) {
    const LinearWeights* w = p.weights[std::size_t(i)];
    const Tensor* y = p.outputs[std::size_t(i)];
    if (!w || !y) fail("projection: matrix ", i, " has no weights or no output");
    if (w->weight.rank() != 2 || w->cols() != k || y->numel() != m * w->rows())
      fail("projection: input ", shape_to_string(p.input->shape()), ", weights ", shape_to_string(w->weight.shape()),
           ", output ", shape_to_string(y->shape()));
    if (const Tensor* b = w->bias_or_null(); b && b->numel() != w->rows())
      fail("projection: ", b->numel(), " biases for ", w->rows(), " rows of weights");
  }
  if (p.epilogue == Epilogue::SwiGLU && p.weights[0]->weight.shape() != p.weights[1]->weight.shape())
    fail("projection: gate ", shape_to_string(p.weights[0]->weight.shape()), " and up ",
         shape_to_string(p.weights[1]->weight.shape()), " differ");
  if (p.norm && !p.normed) fail("projection: a norm before the product needs a slot for the normed rows");
  if (p.norm && p.normed->raw() && p.normed->numel() != p.input->numel())
    fail("projection: the norm slot ", shape_to_string(p.normed->shape()), " does not fit the input ",
         shape_to_string(p.input->shape()));
  check_norm(p.norm, *p.input, "input");
  if (p.epilogue == Epilogue::Residual) {
    if (!p.residual || p.residual->numel() != p.outputs[0]->numel())
      fail("projection: the residual does not match the product ", shape_to_string(p.outputs[0]->shape()));
    if (p.then_norm && !p.then_normed) fail("projection: the closing norm needs a slot");
    if (p.then_norm && p.then_normed->raw() && p.then_normed->numel() != p.residual->numel())
      fail("projection: the closing norm's slot ", shape_to_string(p.then_normed->shape()), " does not fit the residual ",
           shape_to_string(p.residual->shape()));
    check_norm(p.then_norm, *p.residual, "closing");
  } else if (p.then_norm) {
    fail("projection: a closing norm follows a residual add only");
  }
  if (p.activated && p.epilogue != Epilogue::SwiGLU && p.epilogue != Epilogue::Gelu)
    fail("projection: an activation slot follows a SwiGLU or GELU epilogue only");
  if (p.rope_cos) {
    if (p.epilogue != Epilogue::Store || p.count != 3 || !p.rope_sin)
      fail("projection: RoPE rotates the q and k of a q+k+v projection, with both tables");
    for (int i = 0; i < 2; ++i) {
      const Tensor& y = *p.outputs[std::size_t(i)];
      if (y.rank() != 3 || p.rope_cos->shape() != Shape{y.dim(0), y.dim(2)} || p.rope_sin->shape() != p.rope_cos->shape())
        fail("projection: RoPE tables ", shape_to_string(p.rope_cos->shape()), " do not fit the rotated output ",
             shape_to_string(y.shape()), " ([rows, heads, head_dim] with tables [rows, head_dim])");
    }
  }
}

void rotate_unfused(Backend& be, const Projection& p) {
  if (!p.rope_cos) return;
  be.rope(*p.outputs[0], *p.rope_cos, *p.rope_sin);
  be.rope(*p.outputs[1], *p.rope_cos, *p.rope_sin);
}

Tensor& activation_slot(Backend& be, const Projection& p) {
  if (!p.activated) return *p.outputs[0];
  Tensor& slot = *p.activated;
  if (!slot.raw()) {
    Tensor operand = be.alloc_operand(p.outputs[0]->shape(), p);
    slot = operand.raw() ? std::move(operand) : *p.outputs[0];
  }
  if (slot.numel() != p.outputs[0]->numel())
    fail("projection: the activation slot ", shape_to_string(slot.shape()), " does not fit ",
         shape_to_string(p.outputs[0]->shape()));
  return slot;
}

Tensor& norm_slot(Backend& be, Tensor& slot, const Tensor& like, const Projection& p) {
  if (!slot.raw()) slot = be.alloc_normed(like.shape(), p);
  return slot;
}

void normalise(Backend& be, const RowNorm& norm, const Tensor& x, Tensor& y, const Projection& reader) {
  norm_slot(be, y, x, reader);
  if (y.numel() != x.numel())
    fail("projection: the norm slot ", shape_to_string(y.shape()), " does not fit ", shape_to_string(x.shape()));
  const int64_t g = norm.width(), groups = x.numel() / g;
  const Tensor in = x.reshaped({groups, g});
  Tensor out = y.reshaped({groups, g});
  if (norm.kind == RowNorm::Kind::Rms) be.rms_norm(in, norm.weights->weight, norm.eps, out);
  else be.layer_norm(in, norm.weights->weight, norm.weights->bias, norm.eps, out);
}

const Tensor& unfused_prologue(Backend& be, const Projection& p) {
  if (!p.norm) return *p.input;
  if (!p.normed_ready || !p.normed->raw()) normalise(be, p.norm, *p.input, *p.normed, p);
  return *p.normed;
}

void project_unfused(Backend& be, const Projection& p) {
  check_projection(p);
  Tensor& activation = activation_slot(be, p);
  const Tensor& in = unfused_prologue(be, p);
  const auto product = [&](int i) {
    const LinearWeights& w = *p.weights[std::size_t(i)];
    be.linear(in, w, *p.outputs[std::size_t(i)]);
  };
  switch (p.epilogue) {
    case Epilogue::Store:
      for (int i = 0; i < p.count; ++i) product(i);
      rotate_unfused(be, p);
      return;
    case Epilogue::Gelu:
      product(0);
      be.gelu(*p.outputs[0], p.gelu_kind, activation);
      return;
    case Epilogue::SwiGLU:
      product(0);
      product(1);
      be.silu_mul(*p.outputs[0], *p.outputs[1], activation);
      return;
    case Epilogue::Residual:
      product(0);
      be.add(*p.residual, *p.outputs[0], *p.residual);
      if (p.then_norm) normalise(be, p.then_norm, *p.residual, *p.then_normed, p);
      return;
  }
}

}  // namespace qvl
