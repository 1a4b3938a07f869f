#pragma once
// The ops Qwen3-VL needs, behind one interface. The model (engine/model) is written once against it; the CPU
// backend implements it in backend/cpu, the CUDA plugin in backend/cuda (its kernels in kernels/). Activations are tensors the backend allocates in its
// own activation type; weights are whatever upload() made of the checkpoint's tensors. The model states each
// projection site and attention once (projection.h); the backend picks fused kernels or the unfused reference.
//
// Shapes: "rows" are tokens. Linear weights are [out, in] (PyTorch layout). Per-head tensors are [S, H, D].
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/fusions.h"
#include "backend/kernel_timing.h"
#include "backend/projection.h"
#include "backend/weight_format.h"
#include "core/tensor.h"
#include "core/top_k.h"

namespace qvl {

// Which keys each query may see. Causal: query i (absolute position past + i) sees keys [0, past + i].
// Segments: bidirectional inside each [bounds[j], bounds[j+1]) block, nothing across (one block per image).
// Causal on device: `past` is read from a one-element index tensor when the op runs (a recorded decode step
// replays with the current position); `past` and kv_len given on the host are then upper bounds.
// Block-sparse causal (prefill, 16 queries or more): positions are cut into blocks of kSparseBlock; query block qb
// sees key block kb only where block_layout[qb · blocks + kb] is set (and causally), blocks = the side of the square
// layout, covering positions [0, past + S). local_global_layout makes the long-context layout: a sliding window of
// blocks plus the first blocks seen by all.
struct AttentionMask {
  enum class Kind { Causal, Segments } kind = Kind::Causal;
  int64_t past = 0;
  std::vector<int64_t> bounds;  // Segments only: 0 = b0 < b1 < ... = S
  const Tensor* past_on_device = nullptr;
  std::vector<int64_t> block_layout;  // Causal only, optional: 0/1 per (query block, key block)
  int64_t layout_side = 0;            // blocks per side of block_layout
  static constexpr int64_t kSparseBlock = 64;
  static AttentionMask causal(int64_t past) { return {Kind::Causal, past, {}, nullptr, {}, 0}; }
  static AttentionMask segments(std::vector<int64_t> b) { return {Kind::Segments, 0, std::move(b), nullptr, {}, 0}; }
  static AttentionMask causal_on_device(const Tensor& past, int64_t max_past) {
    return {Kind::Causal, max_past, {}, &past, {}, 0};
  }
  static AttentionMask causal_block_sparse(int64_t past, std::vector<int64_t> layout, int64_t side) {
    return {Kind::Causal, past, {}, nullptr, std::move(layout), side};
  }
  // blocks x blocks: block qb sees the `window` blocks up to itself and the first `global` blocks (kb <= qb).
  static std::vector<int64_t> local_global_layout(int64_t blocks, int64_t window, int64_t global) {
    std::vector<int64_t> layout(std::size_t(blocks * blocks), 0);
    for (int64_t qb = 0; qb < blocks; ++qb)
      for (int64_t kb = 0; kb <= qb; ++kb) layout[std::size_t(qb * blocks + kb)] = qb - kb < window || kb < global;
    return layout;
  }
  // The layout's line for the query at absolute position p: entry kb says whether it sees key block kb.
  const int64_t* layout_row(int64_t p) const {
    return block_layout.data() + p / kSparseBlock * layout_side;
  }
  // Throws unless a block layout (if any) is square, covers `queries` queries after `past`, and keeps every block's
  // own diagonal (so no query is left with nothing to attend to).
  void check_block_layout(int64_t queries) const;
};

// How an image becomes vision patches: v = (u − mean[c]) / std[c] per channel, the frame repeated over `temporal`
// frames, cut into patch x patch squares listed in merge x merge window order; each row is (c, t, y, x).
struct PatchLayout {
  int64_t patch = 16, temporal = 2, merge = 2;
  float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};
};

// Throws unless `image` is [H, W, 3] u8 that tiles into the layout's windows and `out` holds its patches.
void check_patchify(const Tensor& image, const PatchLayout& layout, const Tensor& out);

// Four table rows and their weights for each row of an output (Backend::add_blended_rows): a bilinear interpolation.
struct RowBlend {
  static constexpr int kTaps = 4;
  std::vector<int32_t> rows;   // kTaps per output row
  std::vector<float> weights;  // kTaps per output row
  int64_t count() const { return int64_t(rows.size()) / kTaps; }
};

// Throws unless `blend` has one set of taps per row of x, table rows of x's width, and every tap inside the table.
void check_blend(const Tensor& x, const Tensor& table, const RowBlend& blend);
// greedy_pick's arguments: one f32 row, 0 < vocabulary <= its length, two indices for the pick.
void check_greedy_pick(const Tensor& logits, int64_t vocabulary, const Tensor& pick);
// Bytes of the bounds copy Backend::prepare_head_pick makes (CUDA: kernels/head_bounds.cuh; the CPU:
// backend/cpu/head_bounds.h) for a float head of [rows, width]: an int8 value a weight and an f32 scale per 128; 0
// for a width it does not take (a multiple of 16 up to 4,096).
uint64_t head_bounds_bytes(int64_t rows, int64_t width);

// Sampling's temperature and top-k applied where the logits are (Backend::top_k_candidates): what the host's
// sampler would draw from (core/top_k.h), handed back as 2 KB instead of the whole row (the 2B's 608 KB); and, where
// `drawn` is given, top-p and the draw from them there too.
struct TopKSpec {
  static constexpr int64_t kMaxTopK = 64;         // larger top-k samples on the host from the logits
  static constexpr int64_t kMaxCandidates = 128;  // top-k's ties can keep more than k
  int64_t vocabulary = 0;  // the first `vocabulary` logits (0 < vocabulary <= the row)
  int64_t top_k = 0;       // 0 < top_k <= kMaxTopK and < vocabulary
  double temperature = 1;  // > 0
  // The result's layout, int64 on the backend: {count, 1 if a logit was NaN else 0}, then `count` pairs (id, the
  // value's f32 bits) in id order. count -1: the candidates did not fit kMaxCandidates, or (a backend's own kernel)
  // ties it could not count; the caller samples from the logits. With the NaN flag set, count means nothing.
  static constexpr int64_t kSlots = 2 + 2 * kMaxCandidates;
  // The draw (optional; one int64 each on the logits' device): `drawn` = the id core/top_k.h's draw_from_candidates
  // gives from the candidates with `top_p` (0 < top_p <= 1) and `draw_state` (the splitmix64 state,
  // Sampler::draw_state), which it advances as that does; 0 with the state kept where the candidates did not fit or
  // a logit was NaN (the host samples from the logits, or fails), or there were none (every logit -inf). So a step
  // queued after this one embeds the token the host's sampler will draw (all but always: the host checks), before
  // the host has read anything (TextDecoder::queue_step). The spec only points at them: the op writes them.
  double top_p = 1;
  Tensor* draw_state = nullptr;
  Tensor* drawn = nullptr;
};
void check_top_k_candidates(const Tensor& logits, const TopKSpec& spec, const Tensor& out);
// The candidates in a TopKSpec result read back to the host (empty with count -1: see `fitted`).
struct TopKResult {
  bool fitted = false, nan = false;
  std::vector<TopKCandidate> candidates;
};
TopKResult read_top_k_candidates(const Tensor& host);
class Backend;
// Backend::top_k_candidates' selection and draw on the host, into `out` (on `be`): over `values` (divided by the
// temperature in place), the logits of the rows `ids` lists in ascending order (empty: rows 0, 1, ...). The default
// op runs it over the whole row; the CPU's bounded head over its candidates alone, since the rows it set to -inf are
// left out by top-k anyway.
void select_top_k_on_host(Backend& be, std::span<float> values, std::span<const int32_t> ids, const TopKSpec& spec,
                          Tensor& out);

// A copy of a backend's tensor to the host, queued behind the work queued before it (Backend::read_later); get()
// waits for it and hands it over (once).
class PendingRead {
public:
  virtual ~PendingRead() = default;
  virtual Tensor get() = 0;
};

// Work recorded once and replayed many times (a CUDA graph of one decode step). What changes between replays lives
// in device tensors written before each replay (token id, position, rotary rows), or that the work before sets
// (StepHandoff).
class RecordedWork {
public:
  virtual ~RecordedWork() = default;
  virtual uint64_t bytes() const { return 0; }  // device memory the recording holds (its tensors)
};

// What a recording does with host data its ops upload (Backend::begin_recording).
enum class RecordedUploads {
  Refused,  // an error: the recorded work's inputs are written before each replay (a decode step's)
  Fixed,    // copied at once and kept with the recording: the same for every replay (a picture size's tables)
};

// The device memory pool as callers see it (the GUI's occupancy view and block map, the bench's peak memory).
// Faults a test asks a device backend for.
struct FaultInjection {
  int64_t out_of_memory_at = 0;  // the nth device allocation from now fails as out-of-memory (0: none)
  bool lose_device = false;      // the device stops working now, as a GPU that fell off the bus or was reset
  // Sampling on a GPU, for the host's fallbacks: every top_k_candidates result issued from now on says the
  // candidates did not fit; every draw it makes draws one random number late (its token then mostly not the
  // host's). A step recorded meanwhile keeps the fault; the CPU ignores both.
  bool candidates_do_not_fit = false;
  bool draws_one_late = false;
};

struct MemoryReport {
  bool available = false;  // false for backends without a device pool (the CPU)
  int64_t capacity = -1;   // -1: no limit
  int64_t requested = 0, allocated = 0, allocated_peak = 0, reserved = 0, reserved_peak = 0, fragmentation = 0;
  int64_t active_blocks = 0, segments = 0, alloc_count = 0, free_count = 0, oom_retries = 0;
  std::vector<std::pair<std::string, int64_t>> by_owner;  // "weights", "kv cache", "activations", "workspace"
  struct Block {
    int64_t offset = 0, size = 0;
    bool allocated = false;
    std::string owner;
  };
  struct Segment {
    int64_t size = 0;
    std::vector<Block> blocks;  // in address order
  };
  std::vector<Segment> segment_map;  // only when asked for
};

// The attention prologue of a decoder layer: per-head RMSNorm of q and k (in place), RoPE on both, and k, v
// appended to the layer's caches at `row` (or at the position read from `row_on_device`).
struct HeadNormRopeAppend {
  Tensor* q = nullptr;  // [S, Hq, D]
  Tensor* k = nullptr;  // [S, Hkv, D]
  const Tensor* v = nullptr;
  const Tensor* q_norm = nullptr;  // [D]
  const Tensor* k_norm = nullptr;
  float eps = 0;
  const Tensor* cos = nullptr;  // [S, D]
  const Tensor* sin = nullptr;
  Tensor* cache_k = nullptr;  // [capacity, Hkv, D]
  Tensor* cache_v = nullptr;
  int64_t row = 0;
  const Tensor* row_on_device = nullptr;
};
// The attention of the newest query row to `count` cached rows from `first` (an image's tokens), for a view: the
// probabilities over all kv_len keys (softmax with `scale`), of one head or the mean of the heads, scaled so that
// the largest of those rows is 255 and rounded: heat [count] f32 holding whole numbers 0..255.
struct AttentionTap {
  const Tensor* q = nullptr;        // [1, Hq, D] after the head norm and RoPE
  const Tensor* cache_k = nullptr;  // [capacity, Hkv, D]
  int64_t kv_len = 0;               // keys in the cache, or ...
  const Tensor* past_on_device = nullptr;  // ... the query's position on the device (kv_len = position + 1)
  int64_t first = 0, count = 0;
  int64_t head = -1;  // -1: the mean of the heads
  float scale = 1;
  Tensor* heat = nullptr;  // [count] f32 on the backend; rows past kv_len get 0
};
void check_attention_tap(const AttentionTap& tap);

// The end of a recorded decode step that the next step follows with nothing copied in the queue between the two
// (TextDecoder::queue_step): the step's `pick` into slot past mod slots of `handed`, then the next step's inputs:
// `past` advanced by one, `cos` and `sin` row (past + 1) mod rows of `rotary`. `past` is read before it is written.
struct StepHandoff {
  const Tensor* pick = nullptr;    // [n] I64 on the backend
  Tensor* handed = nullptr;        // [slots, n] I64 on the host (Backend::alloc_handed)
  Tensor* past = nullptr;          // [1] I64 on the backend
  const Tensor* rotary = nullptr;  // [rows, 2, D] f32 on the backend: a cache position's cos row, then its sin row
  Tensor* cos = nullptr;           // [1, D] f32 on the backend
  Tensor* sin = nullptr;
};
void check_step_handoff(const StepHandoff& op);

class DeviceInterop;
// Throws qvl::Error unless the shapes fit (both paths check the same way).
void check_head_norm_rope_append(const HeadNormRopeAppend& op);
// The unfused reference: rms_norm, rope and copy_rows as separate ops.
void qk_norm_rope_append_unfused(Backend& be, const HeadNormRopeAppend& op);

// What a backend can run, for the model and the GUI to ask instead of knowing backends by name.
struct BackendLimits {
  // Block-sparse causal attention (AttentionMask::block_layout) runs for chunks of at least this many queries (the
  // CUDA tiled kernels' query blocks); shorter chunks attend densely.
  int64_t block_sparse_min_queries = 1;
  // Its multi-row products read 16-bit copies of their inputs (cuBLAS on 16-bit weights; the memory plan counts
  // them). The SM61 profile's tiled GEMM and the CPU read f32 rows.
  bool narrows_product_inputs = false;
  // Decode steps find top-k's candidates here for rows of at most this many logits (the CUDA kernel's grid:
  // 262,144). 0: a backend whose logits are on the host already, where the sampler selects in place (the op's default
  // would copy the row first).
  int64_t top_k_max_vocabulary = 0;
};

// The physical device behind a backend, where there is one (a Vulkan device is matched to it by the UUID).
struct DeviceIdentity {
  std::string name;
  int index = 0;
  std::array<uint8_t, 16> uuid{};
};

// A point in a backend's queue of work (Backend::mark): on a device, an event the device passes when it reaches
// that point; on a backend that runs each call to completion, the host's clock.
struct QueueMark {
  std::shared_ptr<void> event;
  std::chrono::steady_clock::time_point host{};
};

class Backend {
public:
  virtual ~Backend() = default;

  // ---- Services ----
  virtual std::string name() const = 0;
  virtual DType activation_type() const = 0;
  virtual BackendLimits limits() const { return {}; }
  // Facets: nullopt / empty where the backend has no such thing.
  virtual std::optional<DeviceIdentity> device_identity() const { return std::nullopt; }
  // Memory shared with a renderer (interop.h): imports and the pictures drawn into them. nullptr: none.
  virtual DeviceInterop* interop() { return nullptr; }
  // Which fused kernels project(), attention() and qk_norm_rope_append() may use (Fusions::none(): the unfused
  // reference everywhere). Changed between requests; a recorded step keeps the choices it was recorded with.
  void set_fusions(const Fusions& fusions) { fusions_ = fusions; }
  const Fusions& fusions() const { return fusions_; }

  // Per-kernel timing: every op is reported to `sink` (nullptr: off, no timing work). collect_timings hands over
  // what has finished (wait = true: everything queued so far); host backends report as they go.
  virtual void set_timing_sink(KernelTimingSink* sink) { timing_ = sink; }
  virtual void collect_timings(bool /*wait*/) {}
  // Measured read bandwidth of the memory the weights live in (bytes/s): the decode roofline's denominator.
  virtual double measure_read_bandwidth() = 0;
  virtual MemoryReport memory_report(bool /*with_segment_map*/) const { return {}; }
  // How long queued work took where it ran, without the host waiting as it queues: mark() before and after it,
  // elapsed_ms() once the host waits anyway (it waits for `to`). Not while recording.
  virtual QueueMark mark() { return {nullptr, std::chrono::steady_clock::now()}; }
  virtual double elapsed_ms(const QueueMark& from, const QueueMark& to) {
    return std::chrono::duration<double, std::milli>(to.host - from.host).count();
  }
  // Non-empty when the device can no longer run anything (a kernel fault poisons a CUDA context for the rest of the
  // process): the engine then fails the request with this and offers the CPU.
  virtual std::string device_error() { return {}; }
  // The running request's stop flag (nullptr between requests): a host backend stops its long loops when it is set,
  // leaving their outputs unfinished (the model's next check throws Cancelled before they are used).
  void set_stop_flag(const std::atomic<bool>* flag) { stop_ = flag; }
  // Fault injection, for the tests of the failure paths; host backends have neither a pool nor a device to lose.
  virtual void inject_fault(const FaultInjection& /*fault*/) {}

  // ---- Memory ----
  // A weight ready for this backend, told what it is for (the CPU copies large ones onto huge pages, the rest it
  // reads in place: cpu/huge_pages.h).
  virtual Tensor upload(const Tensor& host_weight, WeightRole role) = 0;
  // A linear layer's weights (matrix, scales of a quantised format, bias) uploaded as one unit, in the format the
  // backend stores them in (the CPU's q8 matrices in tiles where it has AVX-512 VNNI: cpu/q8_tiles.h); the
  // two-tensor form for float matrices.
  virtual LinearWeights upload_linear(const LinearWeights& host, WeightRole role = WeightRole::Matrix);
  LinearWeights upload_linear(const Tensor& weight, const Tensor* bias);
  // Matrices that one projection reads together (a layer's q, k and v; its gate and up), uploaded as units. A
  // backend may store them one after another in one allocation, so that a product of many rows can read them as one
  // matrix (CUDA: one GEMM where there were several); by default each is uploaded alone.
  virtual std::vector<LinearWeights> upload_linears(const std::vector<LinearWeights>& host);
  virtual Tensor alloc(Shape shape) = 0;  // activation type
  // A layer's keys or values (of cache_type()), told apart from activations in the memory report.
  virtual Tensor alloc_cache(Shape shape) { return alloc(std::move(shape)); }
  // The KV cache's element type: f32, or narrower where the backend's kernels read it so (bf16 on the CPU and CUDA:
  // half the bytes decode attention reads and a small card or a long chat holds; what transformers keeps in a bf16
  // model). set_cache_type chooses (EngineOptions::kv_cache) for caches allocated from then on; a type the backend
  // cannot keep throws.
  virtual DType cache_type() const { return DType::F32; }
  virtual void set_cache_type(DType type);
  // The element type upload() stores a float weight of type `stored` in (the memory plan counts with it).
  virtual DType weight_storage(DType stored) const { return stored; }
  // The norm slot of a projection (projection.h) in the type the products that read it take; `p` is the projection
  // that reads it, or, for a closing norm, the residual projection that writes it (the layer's matrices share one
  // format). The model never calls this. Default: alloc (the CPU computes in f32).
  virtual Tensor alloc_normed(Shape shape, const Projection& /*p*/) { return alloc(std::move(shape)); }
  // A SwiGLU or GELU projection's activation slot (Projection::activated) in the type the next product reads, or an
  // empty tensor where that is the activations' own type (the slot then is the projection's outputs[0]).
  virtual Tensor alloc_operand(Shape /*shape*/, const Projection& /*p*/) { return {}; }
  // A tensor an op other than a projection fills (the attention's output, [rows, heads, head_dim]) for projections
  // with `reader`'s format to read: in the type their products take where the op writes that type itself (CUDA: the
  // 16-bit operand of cuBLAS rows, where the tensor-core attention runs), else f32. Default: alloc.
  virtual Tensor alloc_for_product(Shape shape, const LinearWeights& /*reader*/) { return alloc(std::move(shape)); }
  // Keys or values [rows, heads, head_dim] that a rotating q+k+v projection writes and attention then reads (the
  // vision tower's), in the type that attention reads best: CUDA's f16 where its tensor-core kernel runs them, which
  // copies f16 rows into its tiles as they are (f32 ones it widens a tile at a time), else f32. Default: alloc.
  virtual Tensor alloc_keys_values(Shape shape) { return alloc(std::move(shape)); }
  // Host f32 <-> backend activations (ids, tables, results).
  virtual Tensor from_host(const Tensor& host_f32) = 0;
  virtual Tensor to_host(const Tensor& t) = 0;
  // to_host, collected later: the host may queue more work before it waits (a decode step queued while the one before
  // it picks). Default: copied now.
  // A host tensor the backend's work writes (alloc_handed) is read once the work queued before the call is done.
  virtual std::unique_ptr<PendingRead> read_later(const Tensor& t);
  // Host memory this backend's queued work may write (StepHandoff::handed), zeroed. Default: plain host memory (a
  // backend that runs each call to completion writes it as it goes).
  virtual Tensor alloc_handed(DType dtype, Shape shape) { return Tensor::zeros(dtype, std::move(shape)); }
  // Index tensors (int64, on the backend) and writes into existing tensors: the inputs of recorded work.
  virtual Tensor alloc_indices(int64_t count) = 0;
  virtual void write_indices(Tensor& dst, std::span<const int64_t> values) = 0;
  virtual void write(Tensor& dst, const Tensor& host_f32) = 0;

  // ---- Composite ops: the backend picks fused kernels or the unfused reference (its Fusions) ----
  // A projection site (projection.h). Default: project_unfused.
  virtual void project(const Projection& p) { project_unfused(*this, p); }
  // out [S, Hq, D] = softmax(q·kᵀ·scale + mask) · v with q [S, Hq, D], k/v [T, Hkv, D] (the first T rows used);
  // query head h reads kv head h / (Hq / Hkv). Fused: one kernel, the scores never in memory; unfused: scores,
  // softmax and weighted sum through memory (CUDA).
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask,
                         float scale, Tensor& out) = 0;
  // Per-head RMSNorm of q [S, Hq, D] and k [S, Hkv, D] (in place), RoPE on both, and k, v appended to the caches at
  // `row` (or at the position in `row_on_device`). Default: qk_norm_rope_append_unfused.
  virtual void qk_norm_rope_append(const HeadNormRopeAppend& op) { qk_norm_rope_append_unfused(*this, op); }
  // A q+k+v projection (Store into op.q, op.k, op.v) and then the attention prologue on its outputs, as one call so
  // that a backend may run the prologue from where its products left them (CUDA: gemm_packed's side-by-side rows,
  // not copied out). The results are q (normalised and rotated, in op.q) and the cache rows; the k and v outputs
  // may be left unwritten. Default: project(p), then qk_norm_rope_append(op).
  virtual void project_then_heads(const Projection& p, const HeadNormRopeAppend& op) {
    project(p);
    qk_norm_rope_append(op);
  }
  // The attention picture of AttentionTap (a view's tap inside a decode step; recorded with it).
  virtual void attention_tap(const AttentionTap& tap) = 0;

  // ---- Basic ops (the unfused references are made of these) ----
  // y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N])
  virtual void linear(const Tensor& x, const LinearWeights& w, Tensor& y) = 0;
  // Per row over the last dimension. RMSNorm: y = w ⊙ (x / rms(x)); LayerNorm: y = w ⊙ (x − mean) / std + b.
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) = 0;
  virtual void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;  // y may alias a
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& y) = 0;
  virtual void gelu(const Tensor& x, GeluKind kind, Tensor& y) = 0;
  // image: [H, W, 3] u8 on the host (resized so that patch·merge divides both sides); out: [H/P·W/P, 3·T·P·P].
  virtual void patchify(const Tensor& image, const PatchLayout& layout, Tensor& out) = 0;
  // y[i] = table[ids[i]] (in floats: a q8 table's rows dequantised); embed_at takes the ids from an index tensor.
  virtual void embed(const LinearWeights& table, std::span<const int32_t> ids, Tensor& y) = 0;
  virtual void embed_at(const LinearWeights& table, const Tensor& ids, Tensor& y) = 0;
  // In place on x [S, H, D] with cos, sin [S, D]: x' = x·cos + rotate_half(x)·sin, rotate_half = [−x₂, x₁].
  virtual void rope(Tensor& x, const Tensor& cos, const Tensor& sin) = 0;
  // dst rows [row, row + src rows) = src; copy_rows_at reads `row` from a one-element index tensor.
  virtual void copy_rows(const Tensor& src, Tensor& dst, int64_t row) = 0;
  virtual void copy_rows_at(const Tensor& src, Tensor& dst, const Tensor& row) = 0;
  // x[rows[i]] += src[i]
  virtual void add_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) = 0;
  // x[rows[i]] = src[i]
  virtual void set_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) = 0;
  // x[i] += ((w[i,0]·t[r[i,0]] + w[i,1]·t[r[i,1]]) + w[i,2]·t[r[i,2]]) + w[i,3]·t[r[i,3]] for each row i of x, with
  // r = blend.rows and w = blend.weights (4 a row), t = `table` (float rows of x's width, on x's device): a bilinear
  // interpolation of a learned position table, each product and sum rounded in this order on every backend (the
  // same bits where the table is stored in one type; the SM61 profile keeps a bf16 table as f16).
  virtual void add_blended_rows(Tensor& x, const Tensor& table, const RowBlend& blend) = 0;
  // Greedy decoding's pick over the first `vocabulary` values of `logits` (one f32 row): pick (2 indices on this
  // backend) = {the first index of the largest value (0 where all are -inf), 1 if any of them is NaN else 0}, as
  // core/first_max.h. Made where the logits are, a decode step hands the host 16 bytes instead of the whole row (the
  // 2B model's 608 KB, copied and scanned on the host every token). Default: read the row back and pick on the host
  // (so a backend that records work overrides it: to_host cannot be recorded).
  virtual void greedy_pick(const Tensor& logits, int64_t vocabulary, Tensor& pick);
  // The output head and greedy decoding's pick in one call: project(head) (one row), then greedy_pick over the first
  // `vocabulary` outputs, so that a backend may pick without computing every logit (Fusions::bounded_head_pick: CUDA
  // and the CPU with a bounds copy, prepare_head_pick). The pick is always greedy_pick's over the logits project would
  // give; the head's output tensor then holds them only where the backend says so (from a bounds copy: an upper bound
  // of each logit, the logit itself where it had to be computed). Default: project, then greedy_pick.
  virtual void project_then_pick(const Projection& head, int64_t vocabulary, Tensor& pick);
  // Likewise the head and top_k_candidates (with its draw where the spec asks): the same result as those over every
  // logit (from a bounds copy the head's output then holds the candidates' logits and -inf elsewhere, over which a
  // host's top-k finds the same candidates). Default: project, then top_k_candidates.
  virtual void project_then_top_k(const Projection& head, const TopKSpec& spec, Tensor& out);
  // Makes what project_then_pick needs to pick from `head` (a weight of this backend) without every logit, where
  // this backend can: true if it did. It takes memory (an int8 copy with a scale per 128 values, 321 MB for the 2B
  // model: head_bounds_bytes), so the engine asks only where there is room for it (CUDA: where the memory plan has;
  // the CPU makes it only where it leaves a quarter of the machine's memory free).
  virtual bool prepare_head_pick(const LinearWeights& /*head*/) { return false; }
  // Whether project_then_pick and project_then_top_k with `head` read its bounds copy here (prepare_head_pick made
  // it and Fusions::bounded_head_pick is on): what a decode step reads of the head (Engine::decode_weight_bytes).
  virtual bool picks_from_bounds_of(const LinearWeights& /*head*/) const { return false; }
  // Sampling's temperature and top-k over one f32 row of logits, into `out` (TopKSpec::kSlots int64 on this backend,
  // laid out as TopKSpec says): the candidates core/top_k.h gives for the same row; then the draw from them where the
  // spec asks for it. Default: read the row back and select and draw on the host (a backend that records work
  // overrides it, as greedy_pick).
  virtual void top_k_candidates(const Tensor& logits, const TopKSpec& spec, Tensor& out);

  // ---- Recording ----
  // Between begin_recording (false: this backend runs ops directly; then nothing is recorded) and end_recording,
  // ops are recorded instead of run; replay runs them. Host data an op uploads meanwhile is refused (write the
  // work's inputs before replaying), or with RecordedUploads::Fixed copied at once and kept with the recording.
  // Backends record only while per-kernel timing is off.
  virtual bool can_record() const { return false; }  // whether begin_recording would begin now
  virtual bool begin_recording(RecordedUploads /*uploads*/ = RecordedUploads::Refused) { return false; }
  virtual std::shared_ptr<RecordedWork> end_recording() { return nullptr; }
  virtual void replay(const RecordedWork& /*work*/) {}
  // StepHandoff, as a recorded step's last op (a recording runs it after everything else it holds). Default: on the
  // host (every tensor there; the reference).
  virtual void hand_off_step(const StepHandoff& op);

protected:
  KernelTimingSink* timing_ = nullptr;
  Fusions fusions_{};
  const std::atomic<bool>* stop_ = nullptr;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace qvl
