#include "backend/backend.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/first_max.h"

namespace qvl {

void check_patchify(const Tensor& image, const PatchLayout& p, const Tensor& out) {
  if (image.dtype() != DType::U8 || image.rank() != 3 || image.dim(2) != 3) fail("patchify: the image must be [H, W, 3] u8");
  const int64_t h = image.dim(0), w = image.dim(1), ps = p.patch, m = p.merge;
  const int64_t gh = h / ps, gw = w / ps;
  if (ps <= 0 || m <= 0 || p.temporal <= 0 || gh * ps != h || gw * ps != w || gh % m || gw % m)
    fail("patchify: a ", w, "x", h, " image does not tile into ", ps, "-pixel patches and ", m, "x", m, " windows");
  if (out.numel() != gh * gw * 3 * p.temporal * ps * ps)
    fail("patchify: ", shape_to_string(out.shape()), " cannot hold the patches of a ", w, "x", h, " image");
}

void check_greedy_pick(const Tensor& logits, int64_t vocabulary, const Tensor& pick) {
  if (logits.dtype() != DType::F32 || rows_of(logits) != 1)
    fail("greedy_pick: the logits must be one f32 row, not ", dtype_name(logits.dtype()), " ", shape_to_string(logits.shape()));
  if (vocabulary <= 0 || vocabulary > logits.numel())
    fail("greedy_pick: a vocabulary of ", vocabulary, " for ", logits.numel(), " logits");
  if (pick.dtype() != DType::I64 || pick.numel() != 2 || pick.device() != logits.device())
    fail("greedy_pick: the pick must be 2 indices on the logits' device");
}

uint64_t head_bounds_bytes(int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0 || width % 16 != 0 || width > 4096) return 0;
  return uint64_t(rows) * uint64_t(width) + uint64_t(rows) * uint64_t((width + 127) / 128) * 4;
}

void Backend::project_then_pick(const Projection& head, int64_t vocabulary, Tensor& pick) {
  project(head);
  greedy_pick(*head.outputs[0], vocabulary, pick);
}

void Backend::project_then_top_k(const Projection& head, const TopKSpec& spec, Tensor& out) {
  project(head);
  top_k_candidates(*head.outputs[0], spec, out);
}

void Backend::greedy_pick(const Tensor& logits, int64_t vocabulary, Tensor& pick) {
  check_greedy_pick(logits, vocabulary, pick);
  const Tensor host = to_host(logits);
  const FirstMax m = first_max({host.data<float>(), std::size_t(vocabulary)});
  const int64_t values[2] = {int64_t(m.index), m.nan ? 1 : 0};
  write_indices(pick, values);
}

void check_step_handoff(const StepHandoff& op) {
  if (!op.pick || !op.handed || !op.past || !op.rotary || !op.cos || !op.sin) fail("hand_off_step: a tensor is missing");
  const Device device = op.pick->device();
  if (op.pick->dtype() != DType::I64 || op.pick->numel() == 0) fail("hand_off_step: the pick must be indices");
  if (op.handed->dtype() != DType::I64 || op.handed->rank() != 2 || op.handed->dim(0) < 1 ||
      op.handed->dim(1) != op.pick->numel() || op.handed->device() != Device::CPU)
    fail("hand_off_step: the handed slots must be [slots, ", op.pick->numel(), "] indices on the host, not ",
         shape_to_string(op.handed->shape()));
  if (op.past->dtype() != DType::I64 || op.past->numel() != 1 || op.past->device() != device)
    fail("hand_off_step: the position must be one index on the pick's device");
  if (op.rotary->dtype() != DType::F32 || op.rotary->rank() != 3 || op.rotary->dim(0) < 1 || op.rotary->dim(1) != 2 ||
      op.rotary->device() != device)
    fail("hand_off_step: the rotary ring must be [rows, 2, D] f32 on the pick's device, not ",
         shape_to_string(op.rotary->shape()));
  for (const Tensor* row : {op.cos, op.sin})
    if (row->dtype() != DType::F32 || row->numel() != op.rotary->dim(2) || row->device() != device)
      fail("hand_off_step: the rotary rows must be ", op.rotary->dim(2), " f32 values on the pick's device");
}

void Backend::hand_off_step(const StepHandoff& op) {
  check_step_handoff(op);
  if (op.pick->device() != Device::CPU) fail("hand_off_step: ", name(), " hands off steps on the host only");
  int64_t* past = op.past->data<int64_t>();
  const int64_t n = op.pick->numel(), d = op.rotary->dim(2);
  std::memcpy(op.handed->data<int64_t>() + *past % op.handed->dim(0) * n, op.pick->data<int64_t>(), std::size_t(n) * 8);
  const float* row = op.rotary->data<float>() + (*past + 1) % op.rotary->dim(0) * 2 * d;
  std::memcpy(op.cos->data<float>(), row, std::size_t(d) * 4);
  std::memcpy(op.sin->data<float>(), row + d, std::size_t(d) * 4);
  ++*past;
}

void check_top_k_candidates(const Tensor& logits, const TopKSpec& spec, const Tensor& out) {
  if (logits.dtype() != DType::F32 || rows_of(logits) != 1)
    fail("top_k_candidates: the logits must be one f32 row, not ", dtype_name(logits.dtype()), " ",
         shape_to_string(logits.shape()));
  if (spec.vocabulary <= 0 || spec.vocabulary > logits.numel())
    fail("top_k_candidates: a vocabulary of ", spec.vocabulary, " for ", logits.numel(), " logits");
  if (spec.top_k <= 0 || spec.top_k > TopKSpec::kMaxTopK || spec.top_k >= spec.vocabulary)
    fail("top_k_candidates: top-k ", spec.top_k, " for a vocabulary of ", spec.vocabulary, " (1 to ",
         TopKSpec::kMaxTopK, ", and below the vocabulary)");
  if (!(spec.temperature > 0 && std::isfinite(spec.temperature)))
    fail("top_k_candidates: the temperature must be a finite positive number, not ", spec.temperature);
  if (out.dtype() != DType::I64 || out.numel() != TopKSpec::kSlots || out.device() != logits.device())
    fail("top_k_candidates: the result must be ", TopKSpec::kSlots, " indices on the logits' device");
  if (!spec.drawn && !spec.draw_state) return;
  if (!(spec.top_p > 0 && spec.top_p <= 1)) fail("top_k_candidates: top_p must be in (0, 1], not ", spec.top_p);
  for (const Tensor* t : {spec.draw_state, spec.drawn})
    if (!t || t->dtype() != DType::I64 || t->numel() != 1 || t->device() != logits.device())
      fail("top_k_candidates: a draw's state and id must be one index each on the logits' device");
}

namespace {
// A result's TopKSpec::kSlots slots, as laid out there.
TopKResult candidates_in(const int64_t* r) {
  TopKResult out;
  out.nan = r[1] != 0;
  if (r[0] < 0 || r[0] > TopKSpec::kMaxCandidates) return out;
  out.fitted = true;
  for (int64_t i = 0; i < r[0]; ++i) {
    const auto bits = uint32_t(r[3 + 2 * i]);
    float value;
    std::memcpy(&value, &bits, sizeof value);
    out.candidates.push_back({value, int32_t(r[2 + 2 * i])});
  }
  return out;
}
}  // namespace

TopKResult read_top_k_candidates(const Tensor& host) {
  if (host.dtype() != DType::I64 || host.numel() != TopKSpec::kSlots || host.device() != Device::CPU)
    fail("top_k_candidates: a result must be ", TopKSpec::kSlots, " indices on the host");
  return candidates_in(host.data<int64_t>());
}

void Backend::top_k_candidates(const Tensor& logits, const TopKSpec& spec, Tensor& out) {
  check_top_k_candidates(logits, spec, out);
  const Tensor host = to_host(logits);
  std::vector<float> row(host.data<float>(), host.data<float>() + spec.vocabulary);  // divided in place below
  select_top_k_on_host(*this, row, {}, spec, out);
}

void select_top_k_on_host(Backend& be, std::span<float> values, std::span<const int32_t> ids, const TopKSpec& spec,
                          Tensor& out) {
  std::vector<int64_t> result(TopKSpec::kSlots, 0);
  std::vector<float> heap;
  int64_t count = 0;
  const bool numbers = temperature_top_k(values, spec.temperature,
                                         spec.top_k, heap, [&](float v, int32_t at) {
                                           if (count < TopKSpec::kMaxCandidates) {
                                             uint32_t bits;
                                             std::memcpy(&bits, &v, sizeof bits);
                                             result[std::size_t(2 + 2 * count)] = ids.empty() ? at : ids[std::size_t(at)];
                                             result[std::size_t(3 + 2 * count)] = bits;
                                           }
                                           ++count;
                                         });
  result[0] = !numbers ? 0 : count > TopKSpec::kMaxCandidates ? -1 : count;
  result[1] = numbers ? 0 : 1;
  be.write_indices(out, result);
  if (!spec.drawn) return;
  auto state = uint64_t(be.to_host(*spec.draw_state).data<int64_t>()[0]);
  const TopKResult found = candidates_in(result.data());  // the slots just written, not read back
  const int64_t id = found.fitted && !found.nan ? draw_from_candidates(found.candidates, spec.top_p, state) : 0;
  const auto bits = int64_t(state);
  be.write_indices(*spec.draw_state, {&bits, 1});
  be.write_indices(*spec.drawn, {&id, 1});
}

static_assert(TopKSpec::kMaxCandidates == int64_t(kMaxSmallDraw), "every fitted result is a small draw");

namespace {
class FinishedRead final : public PendingRead {
public:
  explicit FinishedRead(Tensor t) : t_(std::move(t)) {}
  Tensor get() override {
    if (taken_) fail("a read collected twice");
    taken_ = true;
    return std::move(t_);
  }

private:
  Tensor t_;
  bool taken_ = false;
};
}  // namespace

std::unique_ptr<PendingRead> Backend::read_later(const Tensor& t) {
  Tensor h = to_host(t);
  if (h.raw() == t.raw()) h = h.to(h.dtype());  // a host backend's own tensor: copied, as a later read would not be
  return std::make_unique<FinishedRead>(std::move(h));
}

void check_blend(const Tensor& x, const Tensor& table, const RowBlend& blend) {
  if (x.dtype() != DType::F32) fail("add_blended_rows: x must be f32 rows");
  if (table.device() != x.device() || (table.dtype() != DType::F32 && table.dtype() != DType::BF16 && table.dtype() != DType::F16))
    fail("add_blended_rows: the table must be f32, bf16 or f16 rows on x's device (a ", dtype_name(table.dtype()), " table)");
  if (table.rank() != 2 || table.dim(1) != last_dim(x))
    fail("add_blended_rows: a table ", shape_to_string(table.shape()), " for rows of ", last_dim(x));
  if (blend.rows.size() != blend.weights.size() || int64_t(blend.rows.size()) != rows_of(x) * RowBlend::kTaps)
    fail("add_blended_rows: ", blend.rows.size(), " taps and ", blend.weights.size(), " weights for ", rows_of(x),
         " rows of ", RowBlend::kTaps);
  for (int32_t r : blend.rows)
    if (r < 0 || r >= table.dim(0)) fail("add_blended_rows: row ", r, " is outside the table of ", table.dim(0));
}

void AttentionMask::check_block_layout(int64_t queries) const {
  if (block_layout.empty()) return;
  const int64_t side = layout_side, positions = past + queries;
  if (kind != Kind::Causal || past_on_device)
    fail("attention: a block layout goes with a causal mask whose position is on the host");
  if (side <= 0 || int64_t(block_layout.size()) != side * side)
    fail("attention: the block layout has ", block_layout.size(), " entries, not ", side, " x ", side);
  if (side * kSparseBlock < positions)
    fail("attention: the block layout covers ", side * kSparseBlock, " positions, the queries reach ", positions);
  for (int64_t b = 0; b < side; ++b)
    if (!block_layout[std::size_t(b * side + b)]) fail("attention: block ", b, " of the layout does not see itself");
}

LinearWeights Backend::upload_linear(const LinearWeights& host, WeightRole role) {
  LinearWeights w = host;
  w.weight = upload(host.weight, role);
  if (!w.quantised()) w.format = format_of(w.weight.dtype());  // the SM61 profile stores bf16 as f16
  if (host.scales.raw()) w.scales = upload(host.scales, WeightRole::Vector);
  if (host.bias.raw()) w.bias = upload(host.bias, WeightRole::Vector);
  return w;
}

std::vector<LinearWeights> Backend::upload_linears(const std::vector<LinearWeights>& host) {
  std::vector<LinearWeights> out;
  for (const LinearWeights& w : host) out.push_back(upload_linear(w));
  return out;
}

LinearWeights Backend::upload_linear(const Tensor& weight, const Tensor* bias) {
  return upload_linear(LinearWeights::of(weight, bias ? *bias : Tensor()));
}

void check_head_norm_rope_append(const HeadNormRopeAppend& op) {
  const Tensor &q = *op.q, &k = *op.k, &cache_k = *op.cache_k;
  if (q.rank() != 3 || k.rank() != 3 || cache_k.rank() != 3)
    fail("qk_norm_rope_append: q, k and the cache must be [rows, heads, head_dim]");
  const int64_t s = q.dim(0), hkv = k.dim(1), d = q.dim(2);
  if (k.dim(0) != s || k.dim(2) != d || op.v->numel() != k.numel() || d % 2 || d > 512 || cache_k.dim(1) != hkv ||
      cache_k.dim(2) != d || op.cache_v->numel() != cache_k.numel() || op.q_norm->numel() != d ||
      op.k_norm->numel() != d || op.cos->numel() != s * d || op.sin->numel() != s * d ||
      (!op.row_on_device && (op.row < 0 || op.row + s > cache_k.dim(0))))
    fail("qk_norm_rope_append: shapes q ", shape_to_string(q.shape()), " k ", shape_to_string(k.shape()), " cache ",
         shape_to_string(cache_k.shape()), " at row ", op.row);
}

void check_attention_tap(const AttentionTap& t) {
  if (!t.q || !t.cache_k || !t.heat || t.q->rank() != 3 || t.cache_k->rank() != 3 || t.q->dim(0) != 1)
    fail("attention_tap: q must be [1, heads, head_dim] and the cache [rows, heads, head_dim]");
  const int64_t hq = t.q->dim(1), d = t.q->dim(2), hkv = t.cache_k->dim(1);
  if (hkv <= 0 || hq % hkv || t.cache_k->dim(2) != d || t.head < -1 || t.head >= hq || t.first < 0 || t.count <= 0 ||
      t.first + t.count > t.cache_k->dim(0) || t.heat->numel() != t.count ||
      (!t.past_on_device && (t.kv_len <= 0 || t.kv_len > t.cache_k->dim(0))))
    fail("attention_tap: q ", shape_to_string(t.q->shape()), ", cache ", shape_to_string(t.cache_k->shape()), ", rows ",
         t.first, "+", t.count, ", head ", t.head, ", heat of ", t.heat->numel());
}

void Backend::set_cache_type(DType type) {
  if (type != DType::F32) fail(name(), " keeps its KV cache in f32 (not ", dtype_name(type), ")");
}

void qk_norm_rope_append_unfused(Backend& be, const HeadNormRopeAppend& op) {
  check_head_norm_rope_append(op);
  be.rms_norm(*op.q, *op.q_norm, op.eps, *op.q);
  be.rms_norm(*op.k, *op.k_norm, op.eps, *op.k);
  be.rope(*op.q, *op.cos, *op.sin);
  be.rope(*op.k, *op.cos, *op.sin);
  if (op.row_on_device) {
    be.copy_rows_at(*op.k, *op.cache_k, *op.row_on_device);
    be.copy_rows_at(*op.v, *op.cache_v, *op.row_on_device);
  } else {
    be.copy_rows(*op.k, *op.cache_k, op.row);
    be.copy_rows(*op.v, *op.cache_v, op.row);
  }
}

}  // namespace qvl
