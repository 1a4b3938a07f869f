// The CPU backend: f32 activations, weights used in their stored type (f32/f16/bf16 straight from the mapped
// checkpoint; q8/q4 as quantised at load or read from a quantised folder), all cores through the thread pool, SIMD
// dot products chosen at run time (cpu_products.h over dot_kernels.h and quant_dot_kernels.h).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/activation_kernels.h"
#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_products.h"
#include "backend/cpu/decode_attention.h"
#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/gemm_kernels.h"
#include "backend/cpu/head_bounds.h"
#include "backend/cpu/huge_pages.h"
#include "backend/cpu/q8_tiles.h"
#include "backend/cpu/memory_bandwidth.h"
#include "backend/op_costs.h"
#include "backend/quantize.h"
#include "core/cancel.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace qvl {
namespace {

void expect_f32(const Tensor& t, const char* op, const char* what) {
  if (t.dtype() != DType::F32 || t.device() != Device::CPU) fail(op, ": ", what, " must be an f32 CPU tensor");
}

// An RMSNorm's sum of squares, in double (each square is exact there) over eight independent sums: one running sum
// is a chain of dependent adds (a 2B row of 2,048: 1.02 µs as one chain, 0.55 as eight, a probe on this project's
// machine). The norm and the fused add + norm both sum through here, so they give the same bits.
double sum_of_squares(const float* x, int64_t n) {
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += double(x[i + j]) * x[i + j];
  for (; i < n; ++i) part[0] += double(x[i]) * x[i];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// `d` elements at `row` (a key or value row of an f32 or bf16 tensor) as floats: in place for f32, widened into
// `scratch` (d floats) for bf16: an f32 row is read where it lies, not copied.
const float* row_as_floats(const char* row, DType type, int64_t d, std::vector<float>& scratch) {
  if (type == DType::F32) return reinterpret_cast<const float*>(row);
  convert_elements(type, row, DType::F32, scratch.data(), std::size_t(d));
  return scratch.data();
}

class CpuBackend final : public Backend {
public:
  std::string name() const override { return std::string("cpu (") + cpu::dot_kernels().name + ")"; }
  DType activation_type() const override { return DType::F32; }

  double measure_read_bandwidth() override { return cpu::measure_read_bandwidth(); }

  // Weights of 2 MiB and more are copied onto huge pages (huge_pages.h says why); the rest stay where they are.
  Tensor upload(const Tensor& w, WeightRole) override { return cpu::on_huge_pages(w); }
  // A q8 matrix of whole 16-row tiles goes in tiles where the VNNI kernels run (q8_tiles.h says why), copied from
  // the host's rows at any size (onto huge pages where they are offered). The embedding table too (a tied one is the
  // output head): embed finds a row in its tile. Where the machine has no room for a copy (huge_pages.h), the rows
  // stay where they are.
  using Backend::upload_linear;
  LinearWeights upload_linear(const LinearWeights& host, WeightRole role = WeightRole::Matrix) override {
    if (role == WeightRole::Vector || !cpu::q8_tiles_chosen() || !cpu::tileable(host) || !cpu::room_for_copy(host.nbytes()))
      return Backend::upload_linear(host, role);
    LinearWeights w = cpu::q8_tiles_of(host);
    if (host.bias.raw()) w.bias = upload(host.bias, WeightRole::Vector);
    return w;
  }
  Tensor alloc(Shape shape) override { return Tensor::empty(DType::F32, std::move(shape)); }
  // The KV cache: f32, or bf16 (half the bytes a decode step's attention reads and a long chat holds; the attention
  // widens its rows as it loads them, and copy_rows narrows the appended rows to nearest even, as the GPU does).
  Tensor alloc_cache(Shape shape) override { return Tensor::empty(cache_type_, std::move(shape)); }
  DType cache_type() const override { return cache_type_; }
  void set_cache_type(DType type) override {
    if (type != DType::F32 && type != DType::BF16) fail(name(), " keeps its KV cache in f32 or bf16 (not ", dtype_name(type), ")");
    cache_type_ = type;
  }
  Tensor from_host(const Tensor& t) override { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }
  Tensor to_host(const Tensor& t) override { return t; }

  void linear(const Tensor& x, const LinearWeights& weights, Tensor& y) override {
    expect_f32(x, "linear", "x");
    expect_f32(y, "linear", "y");
    const int64_t k = last_dim(x), m = rows_of(x), n = weights.rows();
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::linear(x, weights, y); });
    if (weights.weight.rank() != 2 || weights.cols() != k || y.numel() != m * n)  // y may be [M, N] or [M, heads, head_dim]
      fail("linear: shapes x ", shape_to_string(x.shape()), " w ", shape_to_string(weights.weight.shape()), " (", n, "x",
           weights.cols(), " ", format_traits(weights.format).name, ") y ", shape_to_string(y.shape()));
    const cpu::ProductOutput out{&weights, y.data<float>()};
    cpu::products(x, {&out, 1}, stop_);
  }

  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::row_norm("rms_norm", x); });
    expect_f32(x, "rms_norm", "x");
    const int64_t d = last_dim(x);
    if (w.numel() != d) fail("rms_norm: weight has ", w.numel(), " elements for rows of ", d);
    const std::vector<float> wv = w.to_f32_vector();
    for_rows(x, [&](const float* in, float* out) {
      const float inv = 1.0f / std::sqrt(float(sum_of_squares(in, d) / double(d)) + eps);
      for (int64_t i = 0; i < d; ++i) out[i] = wv[std::size_t(i)] * (in[i] * inv);
    }, y);
  }

  // Fused where Fusions allow (cpu_products.h): q, k and v as one loop over their rows (qkv_projection), gate/up
  // with SiLU ⊙ up in each chunk of rows (swiglu_projection), and the residual add + RMSNorm of a closing norm in
  // one pass over the rows (add_rms_norm). The input norm runs first, as in the reference.
  void project(const Projection& p) override {
    check_projection(p);
    activation_slot(*this, p);  // outputs[0] itself: the CPU's products read f32
    if (p.epilogue == Epilogue::Store && p.count > 1 && fusions_.qkv_projection) {
      project_together(p);
      return rotate_unfused(*this, p);
    }
    if (p.epilogue == Epilogue::SwiGLU && fusions_.swiglu_projection) return project_swiglu(p);
    if (!fusions_.add_rms_norm || p.epilogue != Epilogue::Residual || p.then_norm.kind != RowNorm::Kind::Rms ||
        p.then_norm.width() != last_dim(*p.residual))
      return project_unfused(*this, p);
    linear(unfused_prologue(*this, p), *p.weights[0], *p.outputs[0]);
    add_rms_norm(*p.residual, *p.outputs[0], p.then_norm.weights->weight, p.then_norm.eps,
                 norm_slot(*this, *p.then_normed, *p.residual, p));
  }

  // Top-k's candidates come through project_then_top_k where they are found from the head's bounds copy; otherwise
  // the sampler selects over the logits in place (the op's default would copy the row first).
  BackendLimits limits() const override {
    BackendLimits l;
    if (head_bounds_ && fusions_.bounded_head_pick) l.top_k_max_vocabulary = std::numeric_limits<int64_t>::max();
    return l;
  }

  // The output head's pick from its bounds copy (head_bounds.h): where there is room for the copy.
  bool prepare_head_pick(const LinearWeights& head) override {
    head_bounds_.reset();  // a copy of another head must not outlive this call
    if (head.quantised() || head.bias.raw()) return false;
    std::optional<cpu::HeadBoundsCopy> copy = cpu::make_head_bounds(head.weight);
    if (!copy) return false;
    head_bounds_ = std::move(copy);
    return true;
  }
  bool picks_from_bounds_of(const LinearWeights& head) const override {
    return fusions_.bounded_head_pick && head_bounds_ && head_bounds_->weight() == head.weight.raw();
  }
  void project_then_pick(const Projection& head, int64_t vocabulary, Tensor& pick) override {
    if (!picks_from_bounds(head)) return Backend::project_then_pick(head, vocabulary, pick);
    check_greedy_pick(*head.outputs[0], vocabulary, pick);
    const FirstMax m = bounded_head(head, vocabulary, 0, 1.0);
    const int64_t values[2] = {int64_t(m.index), m.nan ? 1 : 0};
    write_indices(pick, values);
  }
  void project_then_top_k(const Projection& head, const TopKSpec& spec, Tensor& out) override {
    if (!picks_from_bounds(head)) return Backend::project_then_top_k(head, spec, out);
    check_top_k_candidates(*head.outputs[0], spec, out);
    bounded_head(head, spec.vocabulary, int(spec.top_k), spec.temperature);
    // Top-k over the candidates alone: the other rows are -inf, which top-k leaves out. (Over the whole row the
    // default op copied and divided the 2B's 151,936 logits: 0.29-0.50 ms a step on this project's machine, a probe.)
    const float* logits = head.outputs[0]->data<float>();
    std::vector<int32_t> ids;
    std::vector<float> values;
    for (int64_t r = 0; r < spec.vocabulary; ++r)
      if (logits[r] != -std::numeric_limits<float>::infinity()) ids.push_back(int32_t(r)), values.push_back(logits[r]);
    select_top_k_on_host(*this, values, ids, spec, out);
  }

private:
  // The head's projection from the bounds copy: the switch on, the copy this head's, one row, no bias.
  bool picks_from_bounds(const Projection& head) const {
    check_projection(head);
    const LinearWeights& w = *head.weights[0];
    return picks_from_bounds_of(w) && head.epilogue == Epilogue::Store && head.count == 1 && head.rows() == 1 &&
           !w.bias.raw();
  }
  FirstMax bounded_head(const Projection& head, int64_t vocabulary, int top_k, double temperature) {
    const Tensor& in = unfused_prologue(*this, head);
    expect_f32(in, "the output head's bounded pick", "x");
    expect_f32(*head.outputs[0], "the output head's bounded pick", "the logits");
    const ScopedKernelTimer timer(timing_, [&] {
      return op_cost::make("head bounds+pick", double(head_bounds_->block.nbytes()),
                           2.0 * double(vocabulary) * double(head_bounds_->width));
    });
    return cpu::head_bounds_pick({.x = in.data<float>(), .copy = &*head_bounds_, .vocabulary = vocabulary,
                                  .logits = head.outputs[0]->data<float>(), .top_k = top_k, .temperature = temperature});
  }

  void project_together(const Projection& p) {
    const Tensor& in = unfused_prologue(*this, p);
    expect_f32(in, "linear", "x");
    std::array<cpu::ProductOutput, 3> outputs;
    for (int i = 0; i < p.count; ++i) {
      expect_f32(*p.outputs[std::size_t(i)], "linear", "y");
      outputs[std::size_t(i)] = {p.weights[std::size_t(i)], p.outputs[std::size_t(i)]->data<float>()};
    }
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::linear_together("linear q+k+v", in, p.weights, p.count); });
    cpu::products(in, {outputs.data(), std::size_t(p.count)}, stop_);
  }

  void project_swiglu(const Projection& p) {
    const Tensor& in = unfused_prologue(*this, p);
    Tensor &y = *p.outputs[0], &up = *p.outputs[1];  // check_projection: both there
    expect_f32(in, "linear", "x");
    expect_f32(y, "linear", "y");
    expect_f32(up, "linear", "up");
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::linear(in, *p.weights[0], y, "linear+swiglu", 2); });
    cpu::swiglu_product(in, *p.weights[0], *p.weights[1], y.data<float>(), up.data<float>(), stop_);
  }

  // x += residual, then y = w ⊙ (x / rms(x)), one pass over each row.
  void add_rms_norm(Tensor& x, const Tensor& residual, const Tensor& w, float eps, Tensor& y) {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::add_row_norm("add+rms_norm", x); });
    expect_f32(x, "add_rms_norm", "x");
    expect_f32(residual, "add_rms_norm", "residual");
    const int64_t d = last_dim(x);
    if (w.numel() != d || residual.numel() != x.numel())
      fail("add_rms_norm: shapes x ", shape_to_string(x.shape()), " residual ", shape_to_string(residual.shape()),
           " weight ", w.numel());
    const std::vector<float> wv = w.to_f32_vector();
    float* xp = x.data<float>();
    const float* rp = residual.data<float>();
    float* yp = y.data<float>();
    ThreadPool::global().parallel_for(std::size_t(rows_of(x)), 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t r = begin; r < end; ++r) {
        float* row = xp + int64_t(r) * d;
        const float* res = rp + int64_t(r) * d;
        for (int64_t i = 0; i < d; ++i) row[i] += res[i];
        const float inv = 1.0f / std::sqrt(float(sum_of_squares(row, d) / double(d)) + eps);  // the row still in L1
        for (int64_t i = 0; i < d; ++i) yp[int64_t(r) * d + i] = wv[std::size_t(i)] * (row[i] * inv);
      }
    });
  }

public:
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::row_norm("layer_norm", x); });
    expect_f32(x, "layer_norm", "x");
    const int64_t d = last_dim(x);
    if (w.numel() != d || b.numel() != d) fail("layer_norm: weight/bias size does not match rows of ", d);
    const std::vector<float> wv = w.to_f32_vector(), bv = b.to_f32_vector();
    for_rows(x, [&](const float* in, float* out) {
      double sum = 0;
      for (int64_t i = 0; i < d; ++i) sum += in[i];
      const double mean = sum / double(d);
      double var = 0;
      for (int64_t i = 0; i < d; ++i) var += (in[i] - mean) * (in[i] - mean);
      const float inv = 1.0f / std::sqrt(float(var / double(d)) + eps);
      for (int64_t i = 0; i < d; ++i) out[i] = float(in[i] - mean) * inv * wv[std::size_t(i)] + bv[std::size_t(i)];
    }, y);
  }

  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::elementwise("add", a, 2, y); });
    elementwise2(a, b, y, "add", [](float p, float q) { return p + q; });
  }
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& y) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::elementwise("silu_mul", gate, 2, y); });
    const auto silu_mul = cpu::activation_kernels().silu_mul;
    elementwise2_chunks(gate, up, y, "silu_mul", [&](const float* g, const float* u, float* out, std::size_t n) { silu_mul(g, u, out, n); });
  }
  void gelu(const Tensor& x, GeluKind kind, Tensor& y) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::elementwise(kind == GeluKind::Tanh ? "gelu_tanh" : "gelu_erf", x, 1, y); });
    const auto gelu_tanh = cpu::activation_kernels().gelu_tanh;
    if (kind == GeluKind::Tanh)
      elementwise2_chunks(x, x, y, "gelu", [&](const float* v, const float*, float* out, std::size_t n) { gelu_tanh(v, out, n); });
    else
      elementwise2(x, x, y, "gelu", [](float v, float) { return 0.5f * v * (1.0f + std::erf(v * 0.7071067811865476f)); });
  }

  Tensor alloc_indices(int64_t count) override { return Tensor::empty(DType::I64, {count}); }
  void write_indices(Tensor& dst, std::span<const int64_t> values) override {
    if (dst.dtype() != DType::I64 || dst.numel() != int64_t(values.size())) fail("write_indices: sizes differ");
    std::copy(values.begin(), values.end(), dst.data<int64_t>());
  }
  void write(Tensor& dst, const Tensor& host) override {
    if (dst.numel() != host.numel()) fail("write: sizes differ");
    const Tensor src = host.dtype() == DType::F32 ? host : host.to(DType::F32);
    std::copy_n(src.data<float>(), src.numel(), dst.data<float>());
  }
  void patchify(const Tensor& image, const PatchLayout& p, Tensor& out) override {
    check_patchify(image, p, out);
    const int64_t h = image.dim(0), w = image.dim(1), ps = p.patch, m = p.merge, tp = p.temporal;
    const int64_t gh = h / ps, gw = w / ps;
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::make("patchify", double(image.nbytes() + out.nbytes()), 0); });
    const uint8_t* px = image.data<uint8_t>();
    float* dst = out.data<float>();
    for (int64_t bh = 0; bh < gh / m; ++bh)
      for (int64_t bw = 0; bw < gw / m; ++bw)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < m; ++j) {
            const int64_t py = bh * m + i, pxl = bw * m + j;
            for (int c = 0; c < 3; ++c)
              for (int64_t t = 0; t < tp; ++t)  // the frame is repeated to fill the temporal patch
                for (int64_t y = 0; y < ps; ++y)
                  for (int64_t x = 0; x < ps; ++x)
                    *dst++ = (float(px[((py * ps + y) * w + pxl * ps + x) * 3 + c]) - p.mean[c]) / p.std[c];
          }
  }

  void embed_at(const LinearWeights& table, const Tensor& ids, Tensor& y) override {
    std::vector<int32_t> narrow(std::size_t(ids.numel()));
    for (std::size_t i = 0; i < narrow.size(); ++i) {
      const int64_t id = ids.data<int64_t>()[i];
      narrow[i] = id < 0 || id > INT32_MAX ? -1 : int32_t(id);
    }
    embed(table, narrow, y);
  }
  void copy_rows_at(const Tensor& src, Tensor& dst, const Tensor& row) override {
    copy_rows(src, dst, row.data<int64_t>()[0]);
  }

  void embed(const LinearWeights& table, std::span<const int32_t> ids, Tensor& y) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::embed(table, ids.size()); });
    const int64_t d = table.cols();
    if (rows_of(y) != int64_t(ids.size()) || last_dim(y) != d) fail("embed: output shape ", shape_to_string(y.shape()));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= table.rows()) fail("embed: token id ", ids[i], " is outside the embedding table");
      float* out = y.data<float>() + int64_t(i) * d;
      if (table.quantised()) {
        if (table.tiled) cpu::dequantize_tiled_row(table, ids[i], out);
        else dequantize_row(table, ids[i], out);
        continue;
      }
      const Tensor& t = table.weight;
      convert_elements(t.dtype(), static_cast<const char*>(t.raw()) + std::size_t(ids[i]) * std::size_t(d) * dtype_size(t.dtype()),
                       DType::F32, out, std::size_t(d));
    }
  }

  void rope(Tensor& x, const Tensor& cos, const Tensor& sin) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::rope(x, cos); });
    expect_f32(x, "rope", "x");
    const int64_t s = x.dim(0), h = x.dim(1), d = x.dim(2), half = d / 2;
    if (cos.dim(0) != s || cos.dim(1) != d) fail("rope: cos table ", shape_to_string(cos.shape()), " for x ", shape_to_string(x.shape()));
    float* p = x.data<float>();
    const float* c = cos.data<float>();
    const float* sn = sin.data<float>();
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < h; ++j) {
        float* v = p + (i * h + j) * d;
        const float* ci = c + i * d;
        const float* si = sn + i * d;
        for (int64_t e = 0; e < half; ++e) {
          const float a = v[e], b = v[e + half];
          v[e] = a * ci[e] - b * si[e];
          v[e + half] = b * ci[e + half] + a * si[e + half];
        }
      }
  }

  // The reference of AttentionTap: double sums, each head's softmax over every key, then the mean of the heads.
  void attention_tap(const AttentionTap& t) override {
    check_attention_tap(t);
    const int64_t hq = t.q->dim(1), d = t.q->dim(2), hkv = t.cache_k->dim(1), group = hq / hkv;
    const int64_t kv_len = t.past_on_device ? t.past_on_device->data<int64_t>()[0] + 1 : t.kv_len;
    if (kv_len <= 0 || kv_len > t.cache_k->dim(0)) fail("attention_tap: ", kv_len, " keys in a cache of ", t.cache_k->dim(0));
    const float* q = t.q->data<float>();
    const DType type = t.cache_k->dtype();  // f32 or bf16: each key widened as it is read
    const auto* cache = static_cast<const char*>(t.cache_k->raw());
    std::vector<float> scratch(static_cast<std::size_t>(d));
    std::vector<double> mean(static_cast<std::size_t>(t.count), 0.0), logits(static_cast<std::size_t>(kv_len));
    const int64_t h0 = t.head < 0 ? 0 : t.head, h1 = t.head < 0 ? hq : t.head + 1;
    for (int64_t h = h0; h < h1; ++h) {
      double top = -1e300;
      for (int64_t j = 0; j < kv_len; ++j) {
        const float* key = row_as_floats(cache + std::size_t((j * hkv + h / group) * d) * dtype_size(type), type, d, scratch);
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += double(q[h * d + e]) * double(key[e]);
        logits[std::size_t(j)] = dot * t.scale;
        top = std::max(top, logits[std::size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < kv_len; ++j) sum += std::exp(logits[std::size_t(j)] - top);
      for (int64_t i = 0; i < t.count; ++i)
        if (t.first + i < kv_len) mean[std::size_t(i)] += std::exp(logits[std::size_t(t.first + i)] - top) / sum;
    }
    const double largest = *std::max_element(mean.begin(), mean.end());
    float* heat = t.heat->data<float>();
    for (int64_t i = 0; i < t.count; ++i)
      heat[i] = largest > 0 ? float(std::nearbyint(255.0 * mean[std::size_t(i)] / largest)) : 0.0f;
  }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask_in,
                 float scale, Tensor& out) override {
    const int64_t s = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1);
    AttentionMask mask = mask_in;
    if (mask.past_on_device) {  // the current position, within the bounds given
      const int64_t past = mask.past_on_device->data<int64_t>()[0];
      if (past < 0 || past > mask.past) fail("attention: position ", past, " outside [0, ", mask.past, "]");
      mask = AttentionMask::causal(past);
      kv_len = past + s;
    }
    mask.check_block_layout(s);
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::attention(q, k, kv_len, mask); });
    if (hq % hkv != 0 || k.dim(2) != d || kv_len > k.dim(0)) fail("attention: shapes do not fit");
    const int64_t group = hq / hkv;
    const auto& kernels = cpu::attention_kernels();
    constexpr int64_t kTile = int64_t(cpu::kKeyTile);
    const float* qp = q.data<float>();
    // Keys and values: activations (f32) or the KV cache (f32 or bf16), widened as they are read.
    const DType kv_type = k.dtype();
    if (v.dtype() != kv_type) fail("attention: keys of ", dtype_name(kv_type), " with values of ", dtype_name(v.dtype()));
    const cpu::CacheRowKernels& cache_rows = kernels.rows(kv_type);  // f32 or bf16; another type throws here
    const std::size_t element = dtype_size(kv_type);
    const auto* kp = static_cast<const char*>(k.raw());
    const auto* vp = static_cast<const char*>(v.raw());
    const auto cache_row = [&](const char* base, int64_t t, int64_t kvh) {  // key or value t of kv head kvh
      return base + std::size_t((t * hkv + kvh) * d) * element;
    };
    float* op = out.data<float>();
    // Queries go in blocks of kBlock per head. With the packed GEMM (gemm_kernels.h) a block's scores are one
    // product of its queries with the keys, which a thread packs once for every block of a head (the tasks go head
    // by head, so a thread's run of them shares its heads' keys; a vision head's 784 keys were transposed again for
    // each of its 13 blocks). Without it (no AVX2), keys go in tiles of kTile, transposed once per block: a score then
    // costs d multiply-adds in a 16-wide register instead of a horizontal sum. The product gives the bits the AVX2 and
    // AVX-512 score tiles gave: both are one chain of FMAs over d in order, from zero.
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (s + kBlock - 1) / kBlock;
    auto visible = [&](int64_t i) -> std::pair<int64_t, int64_t> {  // keys [lo, hi) for query i
      if (mask.kind == AttentionMask::Kind::Causal) return {0, std::min(kv_len, mask.past + i + 1)};
      const auto it = std::upper_bound(mask.bounds.begin(), mask.bounds.end(), i);
      return {*(it - 1), *it};
    };
    if (s == 1 && mask.block_layout.empty()) {  // a decode step: one query row (decode_attention.h)
      const auto [first, end] = visible(0);
      cpu::decode_attention({.q = qp, .k = kp, .v = vp, .type = kv_type, .heads = hq, .kv_heads = hkv, .d = d,
                             .first_key = first, .end_key = end, .scale = scale, .out = op, .stop = stop_});
      return;
    }
    const cpu::GemmKernels* gemm = cpu::gemm_kernels();
    const std::size_t grain = std::max<std::size_t>(1, kMinChunkWork / std::size_t(std::max<int64_t>(1, kv_len * d * kBlock)));
    ThreadPool::global().parallel_for(std::size_t(blocks * hq), grain, [&](std::size_t begin, std::size_t end) {
      std::vector<float> qblock(std::size_t(kBlock * d)), key_tile, key_row, scores;  // key_*: the tiles' path alone
      cpu::PackedRows keys;  // the keys from a block's first visible one, kept while the next block starts there too
      for (std::size_t task = begin; task < end; ++task) {
        if (stop_requested(stop_)) return;
        const int64_t h = int64_t(task) / blocks, i0 = int64_t(task) % blocks * kBlock, rows = std::min(kBlock, s - i0);
        const int64_t kvh = h / group;
        int64_t lo = kv_len, hi = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const auto [l, u] = visible(i0 + r);
          lo = std::min(lo, l);
          hi = std::max(hi, u);
          std::copy_n(qp + ((i0 + r) * hq + h) * d, d, qblock.data() + r * d);
        }
        const int64_t span = std::max<int64_t>(0, hi - lo), stride = (span + kTile - 1) / kTile * kTile;
        scores.resize(std::size_t(rows * stride));
        if (gemm) {
          if (span > 0) {
            keys.extend(*gemm, cache_row(kp, lo, kvh), std::size_t(hkv * d) * element, kv_type, std::size_t(d),
                        std::size_t(span));
            cpu::gemm_packed_rows(*gemm, cpu::PackedActivations(qblock.data(), std::size_t(rows), std::size_t(d), gemm->mr),
                                  keys, std::size_t(span), scores.data(), std::size_t(stride));
          }
        } else {
          key_tile.resize(std::size_t(d * kTile));
          key_row.resize(std::size_t(d));
          for (int64_t t0 = lo; t0 < hi; t0 += kTile) {
            const int64_t keys_here = std::min(kTile, hi - t0);
            for (int64_t j = 0; j < kTile; ++j) {  // keys past the span score 0 and are never read
              const float* key = j < keys_here ? row_as_floats(cache_row(kp, t0 + j, kvh), kv_type, d, key_row) : nullptr;
              for (int64_t e = 0; e < d; ++e) key_tile[std::size_t(e * kTile + j)] = key ? key[e] : 0.0f;
            }
            kernels.score_tile(qblock.data(), std::size_t(rows), std::size_t(d), key_tile.data(), scores.data() + (t0 - lo),
                               std::size_t(stride));
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          const auto [l, u] = visible(i0 + r);
          float* row = scores.data() + r * stride - lo;  // row[t] for t in [l, u)
          if (!mask.block_layout.empty()) {  // block-sparse: the keys of blocks the layout hides score -inf
            const int64_t* allowed = mask.layout_row(mask.past + i0 + r);
            for (int64_t t = l; t < u; ++t)
              if (!allowed[t / AttentionMask::kSparseBlock]) row[t] = -INFINITY;
          }
          const float best = kernels.max_scaled(row + l, std::size_t(u - l), scale);
          const float total = kernels.exp_scaled(row + l, std::size_t(u - l), scale, best);
          const float inverse = 1.0f / total;
          for (int64_t t = l; t < u; ++t) row[t] *= inverse;
          if (gemm) {  // the keys this row does not see weigh nothing in the block's product below
            std::fill(row + lo, row + l, 0.0f);
            std::fill(row + u, row + lo + stride, 0.0f);
            continue;
          }
          cache_rows.weighted_rows(row + l, 1, 0, cache_row(vp, l, kvh), std::size_t(u - l), std::size_t(hkv * d),
                                   std::size_t(d), op + ((i0 + r) * hq + h) * d);
        }
        // The block's probabilities times its values as one product (gemm_kernels.h): each value row is read once
        // for the block's rows, where a row at a time read all of them per query (784 rows of a head 4 KB apart).
        if (gemm)
          cpu::gemm_by_rows(*gemm, cpu::PackedActivations(scores.data(), std::size_t(rows), std::size_t(stride), gemm->mr),
                            std::size_t(stride), cache_row(vp, lo, kvh), kv_type, std::size_t(hkv * d), std::size_t(span),
                            std::size_t(d), op + (i0 * hq + h) * d, std::size_t(hq * d));
      }
    });
  }

  void copy_rows(const Tensor& src, Tensor& dst, int64_t row) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::rows("copy_rows", src, 2); });
    const int64_t width = src.numel() / std::max<int64_t>(1, src.dim(0));
    if (row < 0 || row + src.dim(0) > dst.dim(0) || dst.numel() / dst.dim(0) != width) fail("copy_rows: does not fit");
    // As they are between tensors of one type (a kept conversation's cache); f32 rows narrowed into a bf16 cache.
    if (src.dtype() != dst.dtype() && !(src.dtype() == DType::F32 && dst.dtype() == DType::BF16))
      fail("copy_rows: ", dtype_name(src.dtype()), " rows into ", dtype_name(dst.dtype()));
    convert_elements(src.dtype(), src.raw(), dst.dtype(),
                     static_cast<char*>(dst.raw()) + std::size_t(row * width) * dtype_size(dst.dtype()), std::size_t(src.numel()));
  }

  void add_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::rows("add_rows", src, 3); });
    scatter(x, src, rows, [](float& a, float b) { a += b; });
  }
  void set_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::rows("set_rows", src, 2); });
    scatter(x, src, rows, [](float& a, float b) { a = b; });
  }

  void add_blended_rows(Tensor& x, const Tensor& table, const RowBlend& blend) override {
    const ScopedKernelTimer timer(timing_, [&] { return op_cost::rows("add_blended_rows", x, 2 + RowBlend::kTaps); });
    expect_f32(x, "add_blended_rows", "x");
    check_blend(x, table, blend);
    const int64_t d = last_dim(x);
    const std::size_t row_bytes = std::size_t(d) * dtype_size(table.dtype());
    ThreadPool::global().parallel_for(std::size_t(rows_of(x)), std::max<std::size_t>(1, kMinChunkWork / std::size_t(4 * d)),
                                      [&](std::size_t b, std::size_t e) {
      std::vector<float> taps(std::size_t(RowBlend::kTaps * d));  // the four table rows, widened
      for (std::size_t i = b; i < e; ++i) {
        for (int j = 0; j < RowBlend::kTaps; ++j)
          convert_elements(table.dtype(), static_cast<const char*>(table.raw()) + std::size_t(blend.rows[i * RowBlend::kTaps + std::size_t(j)]) * row_bytes,
                           DType::F32, taps.data() + j * d, std::size_t(d));
        const float* w = blend.weights.data() + i * RowBlend::kTaps;
        const float *t0 = taps.data(), *t1 = t0 + d, *t2 = t1 + d, *t3 = t2 + d;
        float* out = x.data<float>() + int64_t(i) * d;
        for (int64_t c = 0; c < d; ++c) out[c] += ((t0[c] * w[0] + t1[c] * w[1]) + t2[c] * w[2]) + t3[c] * w[3];
      }
    });
  }

private:
  template <typename Fn> void for_rows(const Tensor& x, Fn fn, Tensor& y) {
    const int64_t d = last_dim(x), n = rows_of(x);
    if (y.numel() != x.numel()) fail("row op: output shape ", shape_to_string(y.shape()), " for ", shape_to_string(x.shape()));
    const float* in = x.data<float>();
    float* out = y.data<float>();
    // A norm's row costs several cycles an element (its sum of squares in double is one dependent chain), so a
    // chunk holds an eighth of kMinChunkWork's elements: at the full count the 2B's q norm at 64 tokens (1,024 rows
    // of 128) went to two threads, 6 ms of a 222 ms prefill at 16 threads on the GPU machine's host.
    ThreadPool::global().parallel_for(std::size_t(n), std::max<std::size_t>(1, kMinChunkWork / 8 / std::size_t(d)),
                                      [&](std::size_t b, std::size_t e) {
      for (std::size_t r = b; r < e; ++r) fn(in + int64_t(r) * d, out + int64_t(r) * d);
    });
  }
  template <typename Fn> void elementwise2(const Tensor& a, const Tensor& b, Tensor& y, const char* op, Fn fn) {
    elementwise2_chunks(a, b, y, op, [&](const float* pa, const float* pb, float* py, std::size_t n) {
      for (std::size_t i = 0; i < n; ++i) py[i] = fn(pa[i], pb[i]);
    });
  }
  // chunk(a, b, y, n) over contiguous chunks, in parallel.
  template <typename Chunk> void elementwise2_chunks(const Tensor& a, const Tensor& b, Tensor& y, const char* op, Chunk chunk) {
    if (a.numel() != b.numel() || a.numel() != y.numel())
      fail(op, ": sizes differ (", shape_to_string(a.shape()), ", ", shape_to_string(b.shape()), ", ", shape_to_string(y.shape()), ")");
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y.data<float>();
    ThreadPool::global().parallel_for(std::size_t(a.numel()), kMinChunkWork, [&](std::size_t s, std::size_t e) {
      chunk(pa + s, pb + s, py + s, e - s);
    });
  }
  template <typename Fn> void scatter(Tensor& x, const Tensor& src, std::span<const int64_t> rows, Fn fn) {
    const int64_t width = last_dim(x);
    if (last_dim(src) != width || rows_of(src) != int64_t(rows.size())) fail("scatter: ", rows.size(), " rows of ", shape_to_string(src.shape()));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] >= rows_of(x)) fail("scatter: row ", rows[i], " out of range");
      float* dst = x.data<float>() + rows[i] * width;
      const float* s = src.data<float>() + int64_t(i) * width;
      for (int64_t e = 0; e < width; ++e) fn(dst[e], s[e]);
    }
  }

  std::optional<cpu::HeadBoundsCopy> head_bounds_;  // prepare_head_pick's copy of the output head
  DType cache_type_ = DType::F32;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace qvl
