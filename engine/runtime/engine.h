#pragma once
// The engine facade: load a model folder onto a device, then generate answers for conversations with images.
// Everything a caller (the CLI, the GUI's worker thread) needs goes through here.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <functional>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "core/limits.h"
#include "io/model_folder.h"
#include "backend/fusions.h"
#include "model/rope.h"
#include "model/text_decoder.h"
#include "runtime/conversation_cache.h"
#include "runtime/vision_cache.h"
#include "runtime/memory_plan.h"
#include "runtime/profiler.h"
#include "runtime/sampler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "vision/image.h"

namespace qvl {

struct EngineOptions {
  std::string device = "auto";     // "auto", "cpu" or "cuda"
  std::string weights = "bf16";    // "bf16" (as stored), "q8", "q4" (WeightPolicy, model/weights.h) or "auto" (the
                                   // most precise whose memory plan keeps the decoder on the GPU: weights_for)
  int64_t max_context = limits::kContextTokens;  // prompt + answer; longer requests fail with a clear error
  int64_t max_images = limits::kImagesPerRequest;  // images in one request (each costs a few tokens and a decode)
  int64_t image_min_tokens = 0;    // 0: the preprocessor config's budget
  int64_t image_max_tokens = 0;
  std::size_t device_memory_limit = 0;  // the GPU budget: bytes its pool may take ("pretend this is a 2 GB card"; 0: what
                                        // the driver has free less a reserve). The memory plan places parts within it.
  int64_t plan_context = 2048;          // tokens of KV cache the memory plan keeps room for on the GPU
  std::string cuda_profile = "auto";    // "auto" (from the GPU), "sm61" (the Pascal path, on any GPU) or "native"
  std::string kv_cache = "auto";        // the KV cache, on the GPU and the CPU: "bf16" (half the bytes), "f32", or
                                        // "auto": bf16 for a 16-bit checkpoint (as transformers keeps a bf16 one's),
                                        // f32 for an f32 one
  std::function<void(double)> load_progress{};  // fraction of the weights on the device, while loading or moving
  bool cuda_graphs = true;  // decode steps recorded once per request and replayed (off: every kernel launched)
  Fusions fusions{};        // fused ops the model asks for (Fusions::none(): the unfused reference path)
  AttentionWindow attention_window{};  // block-sparse prefill attention for long contexts (blocks = 0: dense)
  // Keys and values of conversations kept between requests (GenerateRequest::conversation_id), least recently used
  // evicted past this; on a GPU also within the KV room of the memory plan. 0: nothing kept.
  uint64_t conversation_cache_bytes = uint64_t(1024) << 20;
  // Image features kept by picture content on the host (vision_cache.h), least recently used evicted past this (a
  // 448 x 448 picture on the 2B: 196 tokens, 6.4 MB). 0: nothing kept.
  uint64_t vision_cache_bytes = uint64_t(256) << 20;
};

struct GenerateRequest {
  std::vector<ChatMessage> messages;
  std::vector<ImageInput> images;  // one per image item, in prompt order; files are decoded only after the prompt
                                   // (sized from their headers) has passed the context limits
  int64_t max_new_tokens = 256;
  // max_new_tokens as a ceiling: a prompt that leaves less room in the context gets a shorter answer instead of an
  // error (an API request that names no length).
  bool answer_fits_context = false;
  SamplingOptions sampling;
  ChatTemplateOptions template_options;
  bool ignore_eos = false;  // benchmarks: always generate max_new_tokens
  int64_t image_min_tokens = 0, image_max_tokens = 0;  // per-image token budget (0: the engine's)
  bool keep_step_logits = false;  // fill GenerateResult's first and last step logits (fused-vs-unfused comparisons)
  // The caller's name for the conversation (a chat's id): its keys and values are kept after the answer, and a later
  // request of the same id whose prompt begins as this one's did (a follow-up question, a regenerated answer) runs
  // only the rest. Empty: nothing is kept.
  std::string conversation_id;
};

struct GenerateTiming {
  double preprocess_ms = 0, vision_ms = 0, prefill_ms = 0, decode_ms = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  int64_t cached_tokens = 0;  // of prompt_tokens, those a kept conversation held (prefill_ms ran only the others)
  int64_t cached_images = 0;  // of the images the kept conversation did not hold, those whose features were kept
  bool vision_replayed = false;  // the tower ran as a recording of an earlier request's (RecordedVisionTower)
  int64_t decode_steps = 0;  // tokens decoded in decode_ms (the first token comes from the prefill)
  // Decoding ahead (TextDecoder::queue_step): the steps queued before the token before them was read, and the steps
  // dropped (the host's token was not the device's) or run again (top-k's candidates did not fit: their logits).
  int64_t steps_ahead = 0, steps_redone = 0;
  double sample_ms = 0;      // of decode_ms, the host sampler's (penalties, temperature, top-k/p and the draw, every
                             // token; a greedy pick made on the backend is in the step's time, this ~0)
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<ImageGrid> image_grids;
  std::vector<int32_t> generated_ids;
  std::string text;
  std::vector<std::pair<int32_t, float>> first_step_top;  // 20 largest logits of the first step, before sampling
  std::vector<float> first_step_logits;                    // all of them (the prefill's), when the request asked
  std::vector<float> last_step_logits;                     // the last decode step's, when asked and one ran
  std::string stop_reason;                                 // "eos", "max_new_tokens" or "cancelled"
  GenerateTiming timing;
};

// Which attention a view watches during decode (Engine::set_attention_view): one layer's, from the newest token to
// the latest image's tokens, of one head or the mean of the heads.
struct AttentionView {
  int64_t layer = -1;  // -1: off (no tap runs)
  int64_t head = -1;   // -1: the mean of the heads
};
// One word for an atomic (layer and head change together), each clamped to -1..2^31-1.
inline uint64_t pack_view(AttentionView v) {
  const auto half = [](int64_t x) { return uint64_t(uint32_t(int32_t(std::clamp<int64_t>(x, -1, INT32_MAX)))); };
  return half(v.layer) << 32 | half(v.head);
}
inline AttentionView unpack_view(uint64_t packed) {
  return {int64_t(int32_t(uint32_t(packed >> 32))), int64_t(int32_t(uint32_t(packed & 0xffffffffu)))};
}

// After each decode step while a view is set and the prompt holds an image: that step's heat over the latest
// image's merged patches, row by row (grid_h x grid_w), on the backend of the layer (valid until the next step).
struct AttentionFrame {
  const Tensor* heat = nullptr;  // [grid_h * grid_w] f32, whole numbers 0..255 (the largest is 255)
  Backend* backend = nullptr;
  int64_t grid_h = 0, grid_w = 0;
  int64_t image = 0;  // which image of the request
  int64_t layer = 0, head = -1, step = 0;
};

// How often a sink that feeds live views (qvl-studio's worker, `qvl bench --views`, which measures what that costs)
// looks at the pool and hands on the live numbers: about 30 times a second, all a view people watch needs.
inline constexpr std::chrono::milliseconds kLiveViewInterval{33};

class TokenSink {
public:
  virtual ~TokenSink() = default;
  // `text` holds only whole characters (it may be empty while a character is split across tokens).
  virtual void on_token(int32_t id, const std::string& text) = 0;
  // After the prompt has run (before the first token): preprocess, vision and prefill times, prompt length.
  virtual void on_prompt_done(const GenerateTiming& /*timing*/) {}
  // After each decode step's forward pass while an AttentionView is set (on the engine's thread).
  virtual void on_attention(const AttentionFrame& /*frame*/) {}
};

class Engine {
public:
  // Throws qvl::Error for a bad model folder or an unusable device ("cuda" without a GPU).
  static std::unique_ptr<Engine> load(const std::filesystem::path& model_dir, const EngineOptions& options = {});
  // A folder already opened and checked (qvl-studio checks a folder before it lets the open model go).
  static std::unique_ptr<Engine> load(ModelFolder model, const EngineOptions& options = {});
  virtual ~Engine() = default;

  // Thread-safe to cancel from another thread: generation stops within one token.
  virtual GenerateResult generate(const GenerateRequest& request, TokenSink* sink = nullptr,
                                  const std::atomic<bool>* cancel = nullptr) = 0;

  // Per-kernel timing of every op the backend runs (nullptr: off). During generation the profiler's listeners get
  // the updated table after every token; GPU timings arrive a token late, and all of them by the end.
  virtual void set_profiler(std::shared_ptr<Profiler> profiler) = 0;
  virtual std::shared_ptr<Profiler> profiler() const = 0;

  // Measured read bandwidth (bytes/s) of the memory the weights live in, for the roofline.
  virtual double measure_read_bandwidth() = 0;
  // The device pool's occupancy (by owner, peaks, fragmentation) and, on request, its segment/block map.
  virtual MemoryReport memory_report(bool with_segment_map = false) const = 0;
  // The backend's facets for a renderer (backend/interop.h): the device it runs on and the memory it can share.
  // Valid until the model moves (set_device, configure_gpu, load); nullptr / nullopt on the CPU.
  virtual std::optional<DeviceIdentity> device_identity() const = 0;
  virtual DeviceInterop* device_interop() = 0;
  // The attention a view watches; safe from any thread, read before every decode step (a change re-records the
  // step once). Layers and heads out of range turn the tap off / take the mean.
  virtual void set_attention_view(AttentionView view) = 0;

  // Moves the model to another device ("auto", "cpu" or "cuda"), between requests. Throws qvl::Error when the device
  // cannot take it; the model then stays where it was. After a GPU fault (generate's error says so) "cpu" still works.
  virtual void set_device(const std::string& device) = 0;

  // Reloads the weights on the GPU with another architecture profile ("auto", "sm61", "native") and pool limit
  // (bytes, 0: none), between requests; a no-op for the settings while the model is on the CPU (they apply when it
  // moves). Throws qvl::Error when the GPU cannot take it; the engine then keeps its previous settings and weights.
  virtual void configure_gpu(const std::string& cuda_profile, std::size_t device_memory_limit) = 0;

  // Which fused ops the model uses from the next request on (between requests).
  virtual void set_fusions(const Fusions& fusions) = 0;
  virtual Fusions fusions() const = 0;

  virtual const Tokenizer& tokenizer() const = 0;
  // The same tokenizer, to count prompts on another thread (safe to share; it outlives a model reloaded).
  virtual std::shared_ptr<const Tokenizer> shared_tokenizer() const = 0;
  // The most tokens one request may hold, prompt and answer: the options' limit, the model's positions and, on a
  // GPU, the memory plan's room for the KV cache.
  virtual int64_t context_tokens() const = 0;
  virtual const ModelFolder& model() const = 0;
  // The image preprocessing the engine applies (the model's, with EngineOptions' token budget).
  virtual const PreprocessorConfig& image_preprocessor() const = 0;
  virtual std::string device() const = 0;           // the backend's id: "cpu" or "cuda" (backend/registry.h)
  virtual BackendKind backend_kind() const = 0;     // what it can do: backend_info(kind)
  virtual std::string backend_name() const = 0;     // e.g. "cpu (avx512)"
  virtual std::string weights() const = 0;          // the weight policy's name: "bf16", "q8", "q4", "q8-g32"...
  virtual std::string kv_cache() const = 0;         // the KV cache's element type on every part: "bf16" or "f32"
  // Bytes of weights one decode step reads as they are held (every decoder layer, the final norm, the output head).
  // With `request`: that request's steps, which read the head's bounds copy instead where its pick is made from it
  // (Backend::picks_from_bounds_of: the GPU's where the memory plan had room, the CPU's where the host had;
  // project_then_pick: greedy, or top-k sampling without penalties), besides the rows they compute again (a few KB).
  virtual uint64_t decode_weight_bytes(const GenerateRequest* request = nullptr) const = 0;
  // Where the parts of the model live on the GPU and the CPU within the GPU's budget (nullopt: all on the CPU).
  virtual std::optional<MemoryPlan> memory_plan() const = 0;
  virtual std::string fallback_reason() const = 0;  // why "auto" did not get CUDA; empty otherwise
  virtual std::string device_error() const = 0;     // why the GPU can no longer be used (after a fault); empty otherwise
  // Conversations kept between requests (GenerateRequest::conversation_id): drop one (a chat deleted), or see them.
  virtual void forget_conversation(const std::string& id) = 0;
  virtual ConversationCacheStats conversation_cache() const = 0;
  // Image features kept by picture content (EngineOptions::vision_cache_bytes).
  virtual VisionCacheStats vision_cache() const = 0;
  // Fault injection (tests of the failure paths): passed to the GPU backend, if one is in use.
  virtual void inject_fault(const FaultInjection& fault) = 0;
};

// The memory plan's question for a model folder and these options: the budget, reserve and storage types of `gpu`
// (its pool's capacity), or without one as the CUDA backend would store the weights (options.cuda_profile "sm61":
// 16-bit floats) under options.device_memory_limit (qvl info --plan for a card this machine does not have).
MemoryPlanRequest memory_plan_request(const ModelFolder& model, const EngineOptions& options, const Backend* gpu = nullptr);
// The weights --weights names. "auto": the most precise of bf16, q8 and q4 whose plan under `request` keeps every
// decoder layer and the head on the GPU, else q4 (the smallest); a folder written by qvl quantize keeps its own.
WeightPolicy weights_for(const ModelFolder& model, const std::string& weights, MemoryPlanRequest request);

}  // namespace qvl
