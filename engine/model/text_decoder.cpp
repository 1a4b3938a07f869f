#include "model/text_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/cancel.h"
#include "core/error.h"
#include "model/rope.h"

namespace qvl {

// The activations of one forward pass over `rows` tokens.
struct DecoderActivations {
  Tensor x, a, q, k, v, attn, proj, gate, up, normed, logits, pick;  // pick: a one-token pass's (TextDecoder::StepPick)
  Tensor mlp;  // the SwiGLU's output, the down projection's input: a slot the backend fills (Projection::activated)
};

// Where this pass's tokens go: known on the host (run directly), or read from device tensors (a recorded step,
// replayed at every position; `max_past` bounds the position).
struct TextDecoder::Position {
  int64_t past = 0;
  const Tensor* past_on_device = nullptr;
  int64_t max_past = 0;
  Tensor cos, sin;
};

// The inputs and activations of a recorded decode step, alive as long as its cache. `ids` is set where the part
// embeds the token itself; otherwise the hidden state is written into buffers.x before each replay. The position and
// the rotary rows are views of one buffer, `inputs`, written in one copy before a replay (a copy in the stream
// between two replays cost ~2-8 µs on the H200, docs/performance.md): the position, a slot of padding, then cos and
// sin (16-byte aligned, for the kernels' vector loads). Where steps may run ahead, the step ends with
// Backend::hand_off_step: its pick into `handed` (host memory), and the next step's position and rows set from
// `rotary`, a ring of kRotaryRingRows cache positions' rows the host fills ahead (a copy every 63 steps), so a
// step queued after another (queue_step) has nothing copied in the stream before or after it.
struct RecordedDecodeStep {
  static constexpr std::size_t kCosAt = 16;  // bytes into `inputs`
  static constexpr int64_t kHandedSlots = int64_t(TextDecoder::kMaxQueued) + 2;  // a slot a queued step, and room to spare
  Tensor ids, inputs, past, cos, sin;
  std::size_t sin_at = 0;
  std::vector<int64_t> host_inputs;  // `inputs` as written, reused from step to step
  Tensor rotary, handed;             // [kRotaryRingRows, 2, head_dim] f32 on the backend, [kHandedSlots, pick] on the host
  std::vector<int64_t> host_rotary;  // `rotary` as last written: cache positions [rotary_from, + kRotaryRingRows)
  int64_t rotary_from = -1, rotary_delta = 0;
  DecoderActivations buffers;
  std::shared_ptr<RecordedWork> work;
  AttentionTapSpec tap;              // the tap recorded into `work`
  TextDecoder::StepPick pick;        // and the pick
  const float* rotary_row(int64_t position) const {  // cos, then sin, of a position the ring holds
    return reinterpret_cast<const float*>(host_rotary.data()) + position % TextDecoder::kRotaryRingRows * 2 * cos.numel();
  }
};

namespace {

// A sampled pick (StepPick::top_k > 0): top-k's candidates (TopKSpec's layout), then the id drawn from them on the
// device, then the state of that draw's random numbers (TopKSpec's draw).
constexpr int64_t kDrawnSlot = TopKSpec::kSlots, kDrawStateSlot = TopKSpec::kSlots + 1;
constexpr int64_t kSampledPickSlots = TopKSpec::kSlots + 2;
Tensor pick_slot(const Tensor& pick, int64_t at) { return pick.slice_rows(at, at + 1); }

// The injection on `be`: as it is where the vision tower ran there (or no backend was named), else copied.
VisionInjection on_backend(const VisionInjection& v, Backend& be) {
  if (!v.backend || v.backend == &be) return v;
  const auto copy = [&](const Tensor& t) { return be.from_host(v.backend->to_host(t)); };
  VisionInjection out{copy(v.embeddings), {}, v.positions, &be};
  for (const Tensor& d : v.deepstack) out.deepstack.push_back(copy(d));
  return out;
}

}  // namespace

VisionInjection VisionInjection::rows(int64_t begin, int64_t end) const {
  // Positions increase, so the features of those inside [begin, end) are one run of rows.
  const auto first = std::lower_bound(positions.begin(), positions.end(), begin);
  const auto last = std::lower_bound(first, positions.end(), end);
  const int64_t r0 = first - positions.begin(), r1 = last - positions.begin();
  VisionInjection out{Tensor(), {}, {}, backend};
  if (r0 == r1) return out;
  for (auto p = first; p != last; ++p) out.positions.push_back(*p - begin);
  out.embeddings = embeddings.slice_rows(r0, r1);
  for (const Tensor& d : deepstack) out.deepstack.push_back(d.slice_rows(r0, r1));
  return out;
}

KvCache::KvCache(const std::vector<DecoderPart>& parts, const TextConfig& c, int64_t capacity)
    : parts_(parts), capacity_(capacity) {
  for (const DecoderPart& part : parts)
    for (int64_t l = part.first_layer; l < part.end_layer; ++l) {
      k_.push_back(part.backend->alloc_cache({capacity, c.num_key_value_heads, c.head_dim}));
      v_.push_back(part.backend->alloc_cache({capacity, c.num_key_value_heads, c.head_dim}));
    }
  decode_steps_.resize(parts.size());
}
KvCache::KvCache(Backend& backend, const TextConfig& c, int64_t capacity)
    : KvCache({DecoderPart{&backend, 0, c.num_hidden_layers}}, c, capacity) {}
KvCache::~KvCache() = default;

uint64_t KvCache::bytes() const {
  uint64_t total = 0;
  for (const auto* tensors : {&k_, &v_})
    for (const Tensor& t : *tensors) total += t.nbytes();
  return total;
}

void KvCache::truncate(int64_t length) {
  if (length < 0 || length > length_) fail("KvCache::truncate to ", length, " of ", length_, " positions");
  length_ = length;
}

void KvCache::copy_prefix_from(const KvCache& other, int64_t length) {
  if (other.parts_ != parts_ || other.k_.size() != k_.size() || length > other.length_ || length > capacity_)
    fail("KvCache: cannot copy ", length, " positions from a cache of other parts or too few positions");
  std::size_t layer = 0;
  for (const DecoderPart& part : parts_)
    for (int64_t l = part.first_layer; l < part.end_layer; ++l, ++layer)
      if (length > 0) {
        part.backend->copy_rows(other.k_[layer].slice_rows(0, length), k_[layer], 0);
        part.backend->copy_rows(other.v_[layer].slice_rows(0, length), v_[layer], 0);
      }
  length_ = length;
}

void KvCache::forget_recorded_steps() {
  for (auto& step : decode_steps_) step.reset();
}

TextDecoder::TextDecoder(std::vector<DecoderPart> parts, const ModelConfig& config, const TextWeights& weights,
                         bool record_decode_steps, AttentionWindow window)
    : parts_(std::move(parts)), c_(config.text), w_(weights), record_decode_steps_(record_decode_steps), window_(window) {
  int64_t next = 0;
  for (const DecoderPart& p : parts_) {
    if (!p.backend || p.first_layer != next || p.end_layer < p.first_layer)
      fail("decoder: parts must cover layers 0..", c_.num_hidden_layers, " in order, each on a backend (the last may "
           "hold none: the output head alone)");
    next = p.end_layer;
  }
  if (parts_.empty() || next != c_.num_hidden_layers || std::size_t(next) != w_.layers.size())
    fail("decoder: the parts cover ", next, " layers of ", c_.num_hidden_layers);
}
TextDecoder::TextDecoder(Backend& backend, const ModelConfig& config, const TextWeights& weights, bool record_decode_steps,
                         AttentionWindow window)
    : TextDecoder({DecoderPart{&backend, 0, config.text.num_hidden_layers}}, config, weights, record_decode_steps,
                  window) {}

DecoderActivations TextDecoder::allocate(std::size_t part, int64_t s, bool pick) {
  Backend& be = *parts_[part].backend;
  const int64_t hidden = c_.hidden_size, hq = c_.num_attention_heads, hkv = c_.num_key_value_heads, d = c_.head_dim;
  // a is the projections' norm slot: the backend allocates it on first use, in the type its products read. gate and
  // up are one allocation, up right after gate, so that a backend may compute both in one product (CUDA:
  // gemm_swiglu_packed) into those bytes. attn is the o product's input, in the type it reads where the attention
  // can write that.
  const Tensor gate_up = be.alloc({2 * s, c_.intermediate_size});
  const DecoderPart& p = parts_[part];
  const Tensor attn = p.first_layer < p.end_layer
                          ? be.alloc_for_product({s, hq, d}, w_.layers[std::size_t(p.first_layer)].o)
                          : be.alloc({s, hq, d});
  return {be.alloc({s, hidden}),     Tensor(),                  be.alloc({s, hq, d}),
          be.alloc({s, hkv, d}),     be.alloc({s, hkv, d}),    attn,
          be.alloc({s, hidden}),     gate_up.slice_rows(0, s), gate_up.slice_rows(s, 2 * s),
          Tensor(),                  has_head(part) ? be.alloc({1, w_.lm_head.rows()}) : Tensor(),
          pick ? be.alloc_indices(pick_.top_k > 0 ? kSampledPickSlots : 2) : Tensor(), Tensor()};
}

Tensor TextDecoder::forward(std::span<const int32_t> ids, const Tensor& cos_host, const Tensor& sin_host,
                            const VisionInjection* vision, KvCache& cache, Returns returns) {
  const auto s = int64_t(ids.size());
  if (s == 0) fail("decoder: no tokens to run");
  if (!queued_.empty()) fail("decoder: a pass while ", queued_.size(), " queued steps are not taken");
  if (returns == Returns::Pick && !pick_.on()) fail("decoder: a pick was asked for with the step pick off");
  if (returns == Returns::Pick && s != 1) fail("decoder: a pick is handed back by one-token passes, not by ", s, " tokens");
  if (cache.length_ + s > cache.capacity_)
    fail("the conversation needs ", cache.length_ + s, " tokens but the context holds ", cache.capacity_);
  // The same split, not only as many parts: layer 1 on a GPU against a cache made with it on the CPU would read
  // host memory from a kernel.
  if (cache.parts_ != parts_ || cache.k_.size() != w_.layers.size()) fail("decoder: the cache was made for other parts");
  for (int32_t id : ids)
    if (id < 0 || id >= w_.embed_tokens.rows()) fail("decoder: token id ", id, " is outside the embedding table");
  Tensor out;
  if (parts_.size() == 1) {
    out = forward_part(0, {ids, nullptr}, cos_host, sin_host, vision, cache, returns);
  } else {
    // The table lives with the output head: the tokens are embedded there and their rows go to the first part.
    Backend& table = *parts_.back().backend;
    Tensor x = table.alloc({s, c_.hidden_size});
    table.embed(w_.embed_tokens, ids, x);
    if (vision) {
      const VisionInjection v = on_backend(*vision, table);
      table.set_rows(x, v.embeddings, v.positions);
    }
    out = table.to_host(x);
    for (std::size_t part = 0; part < parts_.size(); ++part)
      out = forward_part(part, {{}, &out}, cos_host, sin_host, vision, cache, returns);
  }
  stop_if_requested(stop_);  // work skipped after a stop made these logits: never returned
  cache.length_ += s;
  return out;
}

// One part over this pass's tokens: the last part's logits (last position), or every position's hidden state.
Tensor TextDecoder::forward_part(std::size_t part, PartInput in, const Tensor& cos_host, const Tensor& sin_host,
                                 const VisionInjection* vision, KvCache& cache, Returns returns) {
  Backend& be = *parts_[part].backend;
  const int64_t s = in.rows ? in.rows->dim(0) : int64_t(in.ids.size()), past = cache.length_;
  // One-token steps replay the step recorded for this cache, or record it now; backends that cannot record (the
  // CPU, or a GPU while per-kernel timing is on) run the step directly below.
  std::unique_ptr<RecordedDecodeStep>& recorded = cache.decode_steps_[part];
  if (recorded && recorded->work &&
      (!recorded->tap.same_as(tap_) || (has_head(part) && recorded->pick != pick_)))
    recorded.reset();  // recorded with another tap, or (the head's part) another pick
  const auto record_if_needed = [&] {
    if (record_decode_steps_ && !(recorded && recorded->work)) record_step(part, in.rows != nullptr, cache);
  };
  if (s == 1 && !vision && record_decode_steps_) {
    record_if_needed();
    // A step recorded with a pick may leave its logits uncomputed: a pass that wants them runs directly.
    const bool logits_left = has_head(part) && returns == Returns::Logits && pick_.on();
    if (recorded && recorded->work && !logits_left) return replay_step(part, in, cos_host, sin_host, cache, returns);
  }

  DecoderActivations b = allocate(part, s, has_head(part) && returns == Returns::Pick);
  const VisionInjection local = vision ? on_backend(*vision, be) : VisionInjection{};
  if (in.rows) {
    be.write(b.x, *in.rows);
  } else {
    be.embed(w_.embed_tokens, in.ids, b.x);
    if (vision) be.set_rows(b.x, local.embeddings, local.positions);
  }
  run(part, b, {past, nullptr, past, be.from_host(cos_host), be.from_host(sin_host)}, vision ? &local : nullptr, cache);
  // The one-token step this cache replays next, recorded while the device runs this pass (hand_back waits for it),
  // so that a request's first decode step does not wait for its recording (0.4-2.1 ms a request on the H200 by two
  // estimates, docs/performance.md). Not behind a pass too short to cover it (a follow-up turn of a few tokens):
  // there the first token would wait for it instead.
  if (s >= kRecordBehindRows) record_if_needed();
  return hand_back(be, part, b, returns);
}

// What a pass hands on: the greedy pick or the last position's logits, or (a part without the head) every hidden row.
const Tensor& TextDecoder::result(std::size_t part, const DecoderActivations& b, Returns returns) const {
  return !has_head(part) ? b.x : returns == Returns::Pick ? b.pick : b.logits;
}

// The result on the host; where top-k's candidates did not fit (TopKSpec), the logits instead.
Tensor TextDecoder::hand_back(Backend& be, std::size_t part, const DecoderActivations& b, Returns returns) const {
  Tensor out = be.to_host(result(part, b, returns));
  if (has_head(part) && returns == Returns::Pick && candidates_did_not_fit(out)) return be.to_host(b.logits);
  return out;
}

// Records the one-token step of `part` for this cache, where its backend can record now. Its inputs and
// activations outlive the recording (its kernels use these addresses at every replay) and are allocated before it
// begins: a pool that must grow then does so outside the capture.
void TextDecoder::record_step(std::size_t part, bool takes_rows, KvCache& cache) {
  Backend& be = *parts_[part].backend;
  if (!be.can_record()) return;
  auto recorded = std::make_unique<RecordedDecodeStep>();  // the cache's once whole
  RecordedDecodeStep& step = *recorded;
  const int64_t d = c_.head_dim;
  const auto row_bytes = std::size_t(d * 4 + 15) / 16 * 16;
  step.sin_at = RecordedDecodeStep::kCosAt + row_bytes;
  step.inputs = be.alloc_indices(int64_t(step.sin_at + row_bytes) / 8);
  step.host_inputs.assign(std::size_t(step.inputs.numel()), 0);
  step.past = step.inputs.slice_rows(0, 1);
  step.cos = step.inputs.reinterpreted(DType::F32, {1, d}, RecordedDecodeStep::kCosAt);
  step.sin = step.inputs.reinterpreted(DType::F32, {1, d}, step.sin_at);
  step.buffers = allocate(part, 1, has_head(part) && pick_.on());
  // With a pick the step embeds the id in the pick's slot of the id (the greedy pick's first, a sampled pick's
  // draw): the host writes it there, or (a step queued ahead, queue_step) the step before leaves its pick there.
  if (!takes_rows)
    step.ids = !(has_head(part) && pick_.on()) ? be.alloc_indices(1)
               : pick_slot(step.buffers.pick, pick_.top_k > 0 ? kDrawnSlot : 0);
  const bool hands_off = steps_may_run_ahead();
  if (hands_off) {
    step.rotary = be.alloc_indices(kRotaryRingRows * d).reinterpreted(DType::F32, {kRotaryRingRows, 2, d}, 0);
    step.host_rotary.assign(std::size_t(kRotaryRingRows * d), 0);
    step.handed = be.alloc_handed(DType::I64, {RecordedDecodeStep::kHandedSlots, step.buffers.pick.numel()});
  }
  step.tap = tap_;
  step.pick = pick_;
  if (!be.begin_recording()) return;
  try {
    if (!takes_rows) be.embed_at(w_.embed_tokens, step.ids, step.buffers.x);
    run(part, step.buffers, {cache.length_, &step.past, cache.capacity_ - 1, step.cos, step.sin}, nullptr, cache);
    if (hands_off) be.hand_off_step({&step.buffers.pick, &step.handed, &step.past, &step.rotary, &step.cos, &step.sin});
  } catch (...) {
    recorded.reset();
    be.end_recording();  // leave the backend able to run ops again
    throw;
  }
  step.work = be.end_recording();
  cache.decode_steps_[part] = std::move(recorded);
  ++cache.recordings_;
}

// The recorded step replayed at the cache's length with the host's inputs.
Tensor TextDecoder::replay_step(std::size_t part, PartInput in, const Tensor& cos_host, const Tensor& sin_host,
                                KvCache& cache, Returns returns) {
  Backend& be = *parts_[part].backend;
  RecordedDecodeStep& step = *cache.decode_steps_[part];
  if (in.rows) be.write(step.buffers.x, *in.rows);
  for (const Tensor* row : {&cos_host, &sin_host})
    if (row->dtype() != DType::F32 || row->numel() != step.cos.numel())
      fail("decoder: a rotary row must be ", step.cos.numel(), " f32 values");
  replay_at(be, step, in.rows ? std::nullopt : std::optional<int64_t>(in.ids[0]), cache.length_, cos_host.data<float>(),
            sin_host.data<float>());
  return hand_back(be, part, step.buffers, returns);
}

// A recorded step's inputs written (the token id where one is given) and the step replayed.
void TextDecoder::replay_at(Backend& be, RecordedDecodeStep& step, std::optional<int64_t> id, int64_t past,
                            const float* cos, const float* sin) {
  if (id) be.write_indices(step.ids, {&*id, 1});
  step.host_inputs[0] = past;
  char* inputs = reinterpret_cast<char*>(step.host_inputs.data());
  std::memcpy(inputs + RecordedDecodeStep::kCosAt, cos, step.cos.nbytes());
  std::memcpy(inputs + step.sin_at, sin, step.sin.nbytes());
  be.write_indices(step.inputs, step.host_inputs);
  be.replay(*step.work);
}

// The ring holds cache positions `past` and past + 1 (the row the step's hand-off sets for the next one) at
// `rope_delta`, or is written anew from `past`: decode positions are cache position + delta on all three axes. The
// copy is queued after the steps queued before, which read their rows first.
void TextDecoder::hold_rotary_rows(Backend& be, RecordedDecodeStep& step, int64_t past, int64_t rope_delta) const {
  constexpr int64_t rows = kRotaryRingRows;
  if (step.rotary_delta == rope_delta && step.rotary_from >= 0 && step.rotary_from <= past &&
      past + 1 < step.rotary_from + rows)
    return;
  const auto [cos, sin] = decode_rope_tables(c_, past + rope_delta, rows);
  const int64_t d = c_.head_dim;
  auto* ring = reinterpret_cast<float*>(step.host_rotary.data());
  for (int64_t i = past; i < past + rows; ++i) {
    std::memcpy(ring + i % rows * 2 * d, cos.data<float>() + (i - past) * d, std::size_t(d) * 4);
    std::memcpy(ring + i % rows * 2 * d + d, sin.data<float>() + (i - past) * d, std::size_t(d) * 4);
  }
  Tensor storage = step.rotary.reinterpreted(DType::I64, {rows * d}, 0);
  be.write_indices(storage, step.host_rotary);
  step.rotary_from = past;
  step.rotary_delta = rope_delta;
}

bool TextDecoder::steps_may_run_ahead() const {
  // The pick feeds the embedding on the device: it must be a row of the table (untied checkpoints may differ).
  return parts_.size() == 1 && pick_.on() && tap_.layer < 0 && record_decode_steps_ &&
         pick_.vocabulary <= w_.embed_tokens.rows();
}

bool TextDecoder::can_queue_steps(const KvCache& cache) const {
  if (!steps_may_run_ahead()) return false;
  const std::unique_ptr<RecordedDecodeStep>& recorded = cache.decode_steps_[0];
  return recorded && recorded->work && recorded->handed.numel() && recorded->pick == pick_ &&
         recorded->tap.same_as(tap_);
}

void TextDecoder::queue_step(int32_t id, int64_t rope_delta, KvCache& cache, std::optional<uint64_t> draw_state) {
  if (!can_queue_steps(cache))
    fail("decoder: steps are queued only where a one-token step with a pick on one part is recorded, with no tap");
  if (id != kPickedOnDevice && pick_.top_k > 0 && !draw_state)
    fail("decoder: a sampled step queued with its token needs the sampler's draw state");
  if (!queued_.empty() && &cache != queued_for_) fail("decoder: steps are queued for another cache");
  if (queued_.size() >= kMaxQueued) fail("decoder: ", kMaxQueued, " steps are queued already");
  if (id == kPickedOnDevice && queued_.empty()) fail("decoder: a step queued ahead needs a queued step before it");
  if (id != kPickedOnDevice && (id < 0 || id >= w_.embed_tokens.rows()))
    fail("decoder: token id ", id, " is outside the embedding table");
  const int64_t past = cache.length_ + int64_t(queued_.size());
  if (past + 1 > cache.capacity_) fail("the conversation needs ", past + 1, " tokens but the context holds ", cache.capacity_);
  Backend& be = *parts_[0].backend;
  RecordedDecodeStep& step = *cache.decode_steps_[0];
  if (id == kPickedOnDevice && rope_delta != step.rotary_delta)
    fail("decoder: a step queued ahead follows the step before it, whose rotary rows were for another delta");
  hold_rotary_rows(be, step, past, rope_delta);
  if (id == kPickedOnDevice) {
    be.replay(*step.work);  // its token, position and rows as the step before it left them (StepHandoff)
  } else {
    if (pick_.top_k > 0) {  // the device's draws go on from where the host's sampler is
      const auto bits = int64_t(*draw_state);
      Tensor state = pick_slot(step.buffers.pick, kDrawStateSlot);
      be.write_indices(state, {&bits, 1});
    }
    const float* row = step.rotary_row(past);
    replay_at(be, step, id, past, row, row + c_.head_dim);
  }
  const int64_t slot = past % RecordedDecodeStep::kHandedSlots;
  queued_.push_back(be.read_later(step.handed.slice_rows(slot, slot + 1).reshaped({step.handed.dim(1)})));
  queued_for_ = &cache;
}

Tensor TextDecoder::take_step(KvCache& cache) {
  if (queued_.empty()) fail("decoder: no step is queued");
  if (&cache != queued_for_) fail("decoder: the steps were queued for another cache");
  const std::unique_ptr<PendingRead> read = std::move(queued_.front());
  queued_.pop_front();
  Tensor pick = read->get();
  stop_if_requested(stop_);  // as forward: a pick made after a stop is never returned
  // The logits are needed where the candidates did not fit, and the step queued after this one has overwritten them.
  if (candidates_did_not_fit(pick)) {
    drop_queued_steps();
    return {};
  }
  ++cache.length_;
  return pick;
}

int64_t TextDecoder::picked_on_device(const Tensor& pick) const {
  return pick.data<int64_t>()[pick_.top_k > 0 ? kDrawnSlot : 0];
}

TopKResult TextDecoder::candidates(const Tensor& pick) { return read_top_k_candidates(pick.slice_rows(0, TopKSpec::kSlots)); }

void TextDecoder::drop_queued_steps() { queued_.clear(); }

// One layer: q, k, v = proj(norm(x)); q/k head norms, RoPE, cache append; attention; x += o(attn);
// x += down(swiglu(norm(x))). Each projection states its norm and residual; the backend decides whether a norm runs
// inside the product that reads it or after the add that feeds it (projection.h).
void TextDecoder::run(std::size_t part, DecoderActivations& b, const Position& at, const VisionInjection* vision,
                      KvCache& cache) {
  Backend& be = *parts_[part].backend;
  const int64_t first = parts_[part].first_layer, end = parts_[part].end_layer;
  const int64_t s = b.x.dim(0), hq = c_.num_attention_heads, d = c_.head_dim;
  const float eps = float(c_.rms_norm_eps);
  AttentionMask mask =
      at.past_on_device ? AttentionMask::causal_on_device(*at.past_on_device, at.max_past) : AttentionMask::causal(at.past);
  // The window is for prefill chunks (decode steps attend to every cached key) the backend runs block-sparse.
  if (window_.blocks > 0 && !at.past_on_device &&
      s >= std::max(AttentionWindow::kMinQueries, be.limits().block_sparse_min_queries)) {
    const int64_t side = (at.past + s + AttentionMask::kSparseBlock - 1) / AttentionMask::kSparseBlock;
    mask = AttentionMask::causal_block_sparse(at.past, AttentionMask::local_global_layout(side, window_.blocks,
                                                                                          window_.global), side);
  }
  const int64_t kv_len = (at.past_on_device ? at.max_past : at.past) + s;
  const auto rms = [&](const NormWeights& n) { return RowNorm::rms(n, eps); };
  bool input_normed = false;  // b.a holds this layer's normed input (the previous layer's closing norm made it)
  for (int64_t l = first; l < end; ++l) {
    if (!at.past_on_device) stop_if_requested(stop_);  // not while recording: the recording must be whole
    const DecoderLayerWeights& L = w_.layers[std::size_t(l)];
    be.project_then_heads(
        Projection::of(b.x, L.q, L.k, L.v, b.q, b.k, b.v).reading_norm(rms(L.input_norm), b.a, input_normed),
        {&b.q, &b.k, &b.v, &L.q_norm.weight, &L.k_norm.weight, eps, &at.cos, &at.sin, &cache.k_[std::size_t(l)],
         &cache.v_[std::size_t(l)], at.past, at.past_on_device});
    be.attention(b.q, cache.k_[std::size_t(l)], cache.v_[std::size_t(l)], kv_len, mask, 1.0f / std::sqrt(float(d)), b.attn);
    if (s == 1 && l == tap_.layer && tap_.count > 0)
      be.attention_tap({&b.q, &cache.k_[std::size_t(l)], kv_len, at.past_on_device, tap_.first, tap_.count, tap_.head,
                        1.0f / std::sqrt(float(d)), &tap_.heat});
    const Tensor attn = b.attn.reshaped({s, hq * d});
    be.project(Projection::add_to(b.x, attn, L.o, b.proj).then(rms(L.post_attention_norm), b.a));
    be.project(Projection::swiglu(b.x, L.gate, L.up, b.gate, b.up)
                   .reading_norm(rms(L.post_attention_norm), b.a, true)
                   .into_operand(b.mlp));
    // DeepStack features join the residual after the layer: the next layer's norm reads the sum, so it runs then.
    const bool deepstack = vision && std::size_t(l) < vision->deepstack.size();
    input_normed = l + 1 < end && !deepstack;
    Projection down = Projection::add_to(b.x, b.mlp, L.down, b.proj);
    if (input_normed) down.then(rms(w_.layers[std::size_t(l) + 1].input_norm), b.a);
    be.project(down);
    if (deepstack) be.add_rows(b.x, vision->deepstack[std::size_t(l)], vision->positions);
  }
  if (!has_head(part)) return;  // the next part takes every position's hidden state
  // Only the last position's logits are needed (generation reads nothing else).
  const Tensor last = b.x.slice_rows(s - 1, s);
  const Projection head = Projection::of(last, w_.lm_head, b.logits).reading_norm(rms(w_.final_norm), b.normed);
  if (!b.pick.numel()) return be.project(head);
  // The pick may be made without every logit (Backend::project_then_pick, project_then_top_k): a pass with a pick
  // hands back its logits only where top-k's candidates did not fit, and those give the host the same candidates.
  if (pick_.top_k == 0) return be.project_then_pick(head, pick_.vocabulary, b.pick);
  Tensor candidates = b.pick.slice_rows(0, TopKSpec::kSlots), drawn = pick_slot(b.pick, kDrawnSlot),
         draw_state = pick_slot(b.pick, kDrawStateSlot);
  TopKSpec spec{pick_.vocabulary, pick_.top_k, pick_.temperature};
  // Drawn there too, for a step queued after this one (queue_step; a pass not queued leaves the draw unused), where
  // steps may be queued at all.
  if (steps_may_run_ahead()) spec.top_p = pick_.top_p, spec.draw_state = &draw_state, spec.drawn = &drawn;
  be.project_then_top_k(head, spec, candidates);
}

}  // namespace qvl
