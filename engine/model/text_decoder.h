#pragma once
// The Qwen3-VL text decoder (reference spec section 5): GQA attention with per-head q/k RMSNorm before the
// interleaved multimodal RoPE, SwiGLU MLP, DeepStack injection after the first layers, tied or untied head.
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/weights.h"

namespace qvl {

struct RecordedDecodeStep;
struct DecoderActivations;

// Consecutive decoder layers [first_layer, end_layer) on one backend. A memory plan may cut the decoder in parts
// (the first layers on the GPU, the rest on the CPU): the hidden state crosses between parts once per pass. The
// embedding table and the output head live on the last part's backend.
struct DecoderPart {
  Backend* backend = nullptr;
  int64_t first_layer = 0, end_layer = 0;
  bool operator==(const DecoderPart&) const = default;
};

// Keys and values of every layer for the tokens seen so far ([capacity, kv heads, head_dim] each, on the backend of
// the layer's part), and each part's decode step recorded against them (its graph writes into these very tensors).
class KvCache {
public:
  KvCache(const std::vector<DecoderPart>& parts, const TextConfig& config, int64_t capacity);
  KvCache(Backend& backend, const TextConfig& config, int64_t capacity);  // every layer on one backend
  ~KvCache();
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  const std::vector<DecoderPart>& parts() const { return parts_; }
  uint64_t bytes() const;  // keys and values of every layer, at full capacity
  // A conversation kept between requests: forget the positions from `length` on (the next pass writes over them).
  void truncate(int64_t length);
  // Copies the first `length` positions of `other` (made for the same parts and config) into this cache, which then
  // holds them: a kept conversation's cache grown into a larger one.
  void copy_prefix_from(const KvCache& other, int64_t length);
  // Drops the recorded decode steps: they replay the kernels chosen when they were recorded (fusions, timing), so a
  // cache kept between requests records them again for each.
  void forget_recorded_steps();
  // How many decode steps were recorded into this cache (all parts): one a part per request where recording works,
  // and again where the attention tap or the step pick changes.
  int64_t recordings() const { return recordings_; }

private:
  friend class TextDecoder;
  std::vector<DecoderPart> parts_;  // where each layer's keys and values live: a decoder must use the same parts
  std::vector<Tensor> k_, v_;
  int64_t length_ = 0, capacity_ = 0, recordings_ = 0;
  std::vector<std::unique_ptr<RecordedDecodeStep>> decode_steps_;  // one per part
};

// Image features to place into the prompt: rows `positions` (indices into this call's tokens) get the image
// embeddings instead of the pad embedding, and deepstack[l] is added there after decoder layer l. The tensors live on
// `backend` (the vision tower's); a part on another backend gets a copy.
struct VisionInjection {
  Tensor embeddings;
  std::vector<Tensor> deepstack;
  std::vector<int64_t> positions;
  Backend* backend = nullptr;
  // The features of tokens [begin, end) of this call, positions counted from begin (a prefill chunk's share).
  VisionInjection rows(int64_t begin, int64_t end) const;
};

// Block-sparse prefill attention for long contexts (AttentionMask::local_global_layout): each query block of 64
// positions sees the `blocks` key blocks up to its own and the first `global` blocks. blocks = 0: dense. Prefill
// chunks of 16 tokens or more only; decode steps attend to every cached key. An approximation to choose: it changes
// the answers (covering every block, it gives the dense logits exactly).
struct AttentionWindow {
  int64_t blocks = 0, global = 1;
  // Chunks shorter than this attend densely on every backend (and shorter than the backend's own limit, where that
  // is higher): one query block of the tiled kernels, so the CPU and the GPU give the same answers.
  static constexpr int64_t kMinQueries = 16;
};

// A view's tap on one layer's attention during decode steps (Backend::attention_tap): the newest token's
// probabilities over cached rows [first, first + count) (an image's tokens), written into `heat` (f32 [count] on the
// backend of the layer's part). Recorded into the decode step; a step recorded with another tap is recorded again.
struct AttentionTapSpec {
  int64_t layer = -1;  // -1: none
  int64_t head = -1;   // -1: the mean of the heads
  int64_t first = 0, count = 0;
  Tensor heat;
  bool same_as(const AttentionTapSpec& o) const {
    return layer == o.layer && head == o.head && first == o.first && count == o.count && heat.raw() == o.heat.raw();
  }
};

class TextDecoder {
public:
  // record_decode_steps: one-token steps are recorded once per cache and replayed (CUDA graphs) where the backend
  // can record; the replay reads token id (or hidden state), position and rotary rows from device tensors written
  // before it. Fused or unfused kernels are the backend's choice (Backend::set_fusions).
  TextDecoder(std::vector<DecoderPart> parts, const ModelConfig& config, const TextWeights& weights,
              bool record_decode_steps = true, AttentionWindow window = {});
  TextDecoder(Backend& backend, const ModelConfig& config, const TextWeights& weights, bool record_decode_steps = true,
              AttentionWindow window = {});
  // What a pass hands back: the last position's logits (host f32), or (one-token passes with a step pick on) the
  // pick made on the backend, the logits staying there: greedy's {index, 1 if NaN was seen} (2 int64 on the host), or
  // top-k's candidates and the device's draw from them (TopKSpec::kSlots + 2 int64: candidates(), and the draw for
  // queued steps, picked_on_device()); where the candidates did not fit, the logits (f32).
  enum class Returns { Logits, Pick };
  // Runs `ids` at positions [cache.length(), cache.length() + ids.size()) with the given rotary tables
  // ([S, head_dim] host f32), appends their keys/values, and returns what `returns` asks for.
  Tensor forward(std::span<const int32_t> ids, const Tensor& cos, const Tensor& sin, const VisionInjection* vision,
                 KvCache& cache, Returns returns = Returns::Logits);
  const std::vector<DecoderPart>& parts() const { return parts_; }
  // Checked before every layer a pass runs directly and before forward returns (core/cancel.h): a set flag throws
  // Cancelled, leaving the cache as long as it was.
  void set_stop_flag(const std::atomic<bool>* flag) { stop_ = flag; }
  // The next token chosen on the backend from now on (vocabulary > 0; 0: off): the recorded one-token step ends
  // with Backend::project_then_pick (top_k 0: the head and its greedy pick) or Backend::project_then_top_k (with
  // its draw, TopKSpec's) over the first `vocabulary` logits, which may leave logits uncomputed: the prompt's last
  // pass may be one token and want the logits, and then runs directly, not as the recorded step the steps after it
  // replay. forward(..., Returns::Pick) hands the pick back. Set it before the prompt's passes: a step recorded with
  // another pick is recorded again.
  struct StepPick {
    int64_t vocabulary = 0;  // 0: off
    int64_t top_k = 0;       // 0: greedy; else top-k's candidates at `temperature` (TopKSpec's bounds)
    double temperature = 1;
    double top_p = 1;        // a sampled pick's draw on the device: the sampler's top_p
    bool on() const { return vocabulary > 0; }
    bool operator==(const StepPick&) const = default;
  };
  void set_step_pick(StepPick pick) { pick_ = pick; }
  const StepPick& step_pick() const { return pick_; }
  // Decoding ahead: where a one-token step with a pick on one part is recorded for this cache (and no tap is on), a
  // step is queued (queue_step) and its pick collected later (take_step), so the step for the next token can be
  // queued before this one's pick is read, its token the one picked on the device (id kPickedOnDevice): greedy's
  // pick, or a sampled pick's draw from `draw_state` (Sampler::draw_state, written where the id is given) on. The
  // host's wait, its relaunch and its work between steps then overlap the GPU's step (docs/performance.md). The host
  // still picks from what take_step hands back; where its token is not picked_on_device() (a sampled draw whose
  // last bit differed), the step queued with that one is dropped. A queued step writes the cache at cache.length() +
  // the steps queued before it, and rotates at that position + `rope_delta` on all three axes (a decode token's
  // position); the cache grows when take_step hands its pick back. A step queued with kPickedOnDevice follows the
  // step before it with nothing copied in between: that step's end set its token, position and rotary rows on the
  // device (Backend::hand_off_step) and handed its pick to host memory. Steps left queued are dropped
  // (drop_queued_steps, or with the decoder): their positions stay past the cache's length, to be written again.
  static constexpr int32_t kPickedOnDevice = -1;
  static constexpr std::size_t kMaxQueued = 2;  // the step being handled and the one after it
  // The rotary rows of this many cache positions are held on the device for the steps queued ahead (a ring).
  static constexpr int64_t kRotaryRingRows = 64;
  // A pass of at least this many tokens records the cache's one-token step behind it, while the device computes.
  // Shorter passes leave it to the first one-token step, so that a short follow-up's first token does not wait for
  // it. A choice, not measured: on the H200 a 32-token pass (~0.3 ms at the ~9 µs a token of a 512-token prefill)
  // covers part of the recording's 0.4-2.1 ms (two estimates, docs/performance.md); a slower GPU covers more.
  static constexpr int64_t kRecordBehindRows = 32;
  bool can_queue_steps(const KvCache& cache) const;
  void queue_step(int32_t id, int64_t rope_delta, KvCache& cache, std::optional<uint64_t> draw_state = std::nullopt);
  // The oldest queued step's pick, as forward returns it; empty where a sampled step's candidates did not fit (the
  // logits are needed, and the step after it has overwritten them): then nothing is taken, the steps after it are
  // dropped, and the caller runs the step again with forward.
  Tensor take_step(KvCache& cache);
  void drop_queued_steps();
  // A pick's token as the device picked it: what a step queued after it embeds (a sampled one's draw means something
  // only in a pick take_step hands back: queue_step wrote the state it started from).
  int64_t picked_on_device(const Tensor& pick) const;
  // A sampled pick's candidates (top_k > 0).
  static TopKResult candidates(const Tensor& pick);
  // The tap for the one-token steps from now on (layer -1: none).
  void set_attention_tap(AttentionTapSpec tap) { tap_ = std::move(tap); }
  const AttentionTapSpec& attention_tap() const { return tap_; }

private:
  struct Position;
  // A part's input: token ids (the single part embeds them itself) or hidden rows on the host.
  struct PartInput {
    std::span<const int32_t> ids;
    const Tensor* rows = nullptr;
  };
  bool has_head(std::size_t part) const { return part + 1 == parts_.size(); }
  bool steps_may_run_ahead() const;  // can_queue_steps less the recording it needs
  // A sampled pick on the host whose top-k candidates did not fit (TopKSpec's count -1): the logits are needed.
  bool candidates_did_not_fit(const Tensor& pick) const { return pick_.top_k > 0 && pick.data<int64_t>()[0] < 0; }
  const Tensor& result(std::size_t part, const DecoderActivations& b, Returns returns) const;
  Tensor hand_back(Backend& be, std::size_t part, const DecoderActivations& b, Returns returns) const;
  static void replay_at(Backend& be, RecordedDecodeStep& step, std::optional<int64_t> id, int64_t past,
                        const float* cos, const float* sin);
  void hold_rotary_rows(Backend& be, RecordedDecodeStep& step, int64_t past, int64_t rope_delta) const;
  DecoderActivations allocate(std::size_t part, int64_t rows, bool pick);
  Tensor forward_part(std::size_t part, PartInput in, const Tensor& cos, const Tensor& sin,
                      const VisionInjection* vision, KvCache& cache, Returns returns);
  void record_step(std::size_t part, bool takes_rows, KvCache& cache);
  Tensor replay_step(std::size_t part, PartInput in, const Tensor& cos, const Tensor& sin, KvCache& cache,
                     Returns returns);
  void run(std::size_t part, DecoderActivations& b, const Position& at, const VisionInjection* vision, KvCache& cache);

  std::vector<DecoderPart> parts_;
  const TextConfig& c_;
  const TextWeights& w_;
  bool record_decode_steps_;
  AttentionWindow window_;
  const std::atomic<bool>* stop_ = nullptr;
  AttentionTapSpec tap_;
  StepPick pick_;
  std::deque<std::unique_ptr<PendingRead>> queued_;  // the queued steps' picks, oldest first
  const KvCache* queued_for_ = nullptr;               // the cache they write
};

}  // namespace qvl
