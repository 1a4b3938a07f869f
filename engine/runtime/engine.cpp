#include "runtime/engine.h"
#include "runtime/prompt_count.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>

#include "backend/backend.h"
#include "backend/registry.h"
#include "core/cancel.h"
#include "core/content_hash.h"
#include "core/error.h"
#include "io/model_folder.h"
#include "model/text_decoder.h"
#include "model/recorded_vision_tower.h"
#include "runtime/attention_tapper.h"
#include "text/prompt.h"
#include "vision/preprocess.h"

namespace qvl {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// EngineOptions::kv_cache as the type every backend's cache keeps: "auto" keeps 16 bits where transformers does (a
// bf16 checkpoint's cache in bf16; an f16 one's in bf16 too, as there is no f16 cache here and the GPU's always was)
// and f32 for an f32 checkpoint.
DType kv_cache_type(const std::string& name, DType checkpoint_floats) {
  if (name == "auto") return checkpoint_floats == DType::F32 ? DType::F32 : DType::BF16;
  if (name == "bf16") return DType::BF16;
  if (name == "f32") return DType::F32;
  fail("the KV cache type must be auto, bf16 or f32, not \"", name, "\"");
}
DType checkpoint_floats(const ModelFolder& model) {
  return model.checkpoint.find("model.language_model.norm.weight")->info->dtype;  // checked at open
}

// Where the decode steps choose the next token on the head's backend, handing back a pick or a few candidates
// instead of the logits: greedy decoding, or temperature with top-k (the Qwen models' default sampling) and no
// penalty, and nothing to keep. The prompt's last pass may be the one-token step that decoding then replays, so this
// is set before it.
TextDecoder::StepPick step_pick(const Sampler& sampler, const GenerateRequest& request, const Backend& head,
                                int64_t logits) {
  if (request.keep_step_logits) return {};
  const int64_t vocabulary = sampler.vocabulary(logits);
  if (sampler.greedy_only()) return {vocabulary};
  if (sampler.top_k_only(TopKSpec::kMaxTopK) && sampler.top_k() < vocabulary &&
      vocabulary <= head.limits().top_k_max_vocabulary)
    return {vocabulary, sampler.top_k(), sampler.temperature(), sampler.top_p()};
  return {};
}

class Qwen3VLEngine final : public Engine {
public:
  Qwen3VLEngine(ModelFolder model, const EngineOptions& options)
      : options_(options),
        weight_policy_(options.weights == "auto" ? WeightPolicy{} : WeightPolicy::from_name(options.weights)),
        model_(std::move(model)),
        tokenizer_(Tokenizer::load(model_.tokenizer_json)) {
    if (options.attention_window.blocks < 0)
      fail("engine: the attention window takes 0 or more blocks, not ", options.attention_window.blocks);
    if (options.attention_window.global < 0)
      fail("engine: the attention window's global blocks take 0 or more, not ", options.attention_window.global);
    preprocessor_ = with_token_budget(model_.preprocessor, options.image_min_tokens, options.image_max_tokens);
    vision_features_.set_budget(options.vision_cache_bytes);
    place(options.device);
  }

  void configure_gpu(const std::string& cuda_profile, std::size_t device_memory_limit) override {
    const EngineOptions before = options_;
    options_.cuda_profile = cuda_profile;
    options_.device_memory_limit = device_memory_limit;
    if (kind_ != BackendKind::Cuda) return;
    place_or_restore("cuda", before);
    if (profiler_) set_timing_sinks();
  }

  void set_device(const std::string& device) override {
    if (device == options_.device && device_error_.empty()) return;
    place_or_restore(device, options_);
    options_.device = device;
    if (profiler_) set_timing_sinks();
  }

  GenerateResult generate(const GenerateRequest& request, TokenSink* sink, const std::atomic<bool>* cancel) override {
    if (!backend_) fail("no model is loaded (moving it failed, and so did loading it back)");
    if (kind_ == BackendKind::Cuda && !device_error_.empty())
      fail("the GPU failed earlier (", device_error_, "); switch the device to cpu to go on");
    // The stop flag reaches every phase: checked between images, vision blocks and decoder layers, and inside the
    // CPU's long products (core/cancel.h).
    struct StopFlags {
      std::vector<Backend*> backends;
      ~StopFlags() {
        for (Backend* be : backends) be->set_stop_flag(nullptr);
      }
    } flags{backends()};
    for (Backend* be : flags.backends) be->set_stop_flag(cancel);
    GenerateResult result;
    try {
      run(request, sink, cancel, result);
      return result;
    } catch (const Cancelled&) {  // stopped before the answer began: what was done so far, and no answer
      result.stop_reason = "cancelled";
      return result;
    } catch (const std::exception& e) {
      // A kernel fault leaves the CUDA context unusable for the rest of the process: say so, keep the engine.
      device_error_ = backend_->device_error();
      if (device_error_.empty()) throw;
      fail("the GPU failed during generation: ", device_error_, " (", e.what(), "); switch the device to cpu to go on");
    }
  }

private:
  // Loads the weights onto `device` ("auto": the GPU where there is a usable one, else the CPU); on failure the
  // engine keeps what it had.
  void place(const std::string& device) {
    const std::optional<BackendKind> named = qvl::backend_kind(device);
    if (device != "auto" && !named) fail("device must be auto, ", backend_ids(), " (got '", device, "')");
    const BackendInfo& gpu_info = backend_info(BackendKind::Cuda);
    if (named == BackendKind::Cuda && !gpu_info.available)
      fail("--device cuda: CUDA is not available (", gpu_info.reason, ")");
    const DType cache = kv_cache_type(options_.kv_cache, checkpoint_floats(model_));  // every backend's, below
    std::string fallback;
    if (named != BackendKind::Cpu && gpu_info.available && device_error_.empty()) {
      // The GPU's free memory is measured, and the new pool capped, without the old model in it: a model moving to
      // another profile or budget once had both on a 2 GiB card at once, and a budget of 0 planned against what the
      // old model left free.
      if (kind_ == BackendKind::Cuda) release_model();
      try {
        auto gpu = create_backend(BackendKind::Cuda, {options_.device_memory_limit, options_.cuda_profile});
        gpu->set_cache_type(cache);
        const MemoryPlanRequest request = memory_plan_request(model_, options_, gpu.get());
        const WeightPolicy policy = weights_for(model_, options_.weights, request);
        MemoryPlan plan = plan_memory(model_.config, request);
        // The parts the plan leaves off the GPU run on a CPU backend beside it.
        std::unique_ptr<Backend> host = plan.everything_on_gpu() ? nullptr : create_backend(BackendKind::Cpu);
        if (host) host->set_cache_type(cache);
        WeightPlacement placement = WeightPlacement::all_on(*gpu, model_.config);
        if (!plan.vision_on_gpu) placement.vision = host.get();
        if (!plan.head_on_gpu) placement.head = host.get();
        for (int64_t l = plan.gpu_layers; l < plan.layers; ++l) placement.layers[std::size_t(l)] = host.get();
        ModelWeights weights = bind_weights(model_, placement, policy, options_.load_progress);
        if (plan.head_bounds && !gpu->prepare_head_pick(weights.text.lm_head)) plan.drop_head_bounds();
        if (!plan.head_on_gpu && request.head_bounds && !host->prepare_head_pick(weights.text.lm_head))
          plan.drop_head_bounds();
        adopt(std::move(gpu), std::move(host), std::move(weights), BackendKind::Cuda, "", std::move(plan));
        held_policy_ = policy;
        return;
      } catch (const std::exception& e) {
        // --device cuda reports the failure (with the pool's numbers when it is memory); auto takes the CPU.
        if (named == BackendKind::Cuda)
          fail("the model could not be loaded on the GPU: ", e.what(), " (--device cpu runs it on the CPU)");
        fallback = std::string("the GPU could not take the model: ") + e.what();
      }
    } else if (named == BackendKind::Cuda) {
      fail("the GPU failed earlier (", device_error_, "); it cannot be used again in this process");
    } else if (!named) {
      fallback = device_error_.empty() ? gpu_info.reason : "the GPU failed earlier: " + device_error_;
    }
    auto cpu = create_backend(BackendKind::Cpu);
    cpu->set_cache_type(cache);
    // --weights auto on the CPU: as stored (the host's memory is not the budget a GPU's is).
    ModelWeights weights = bind_weights(model_, *cpu, weight_policy_, options_.load_progress);
    // The output head's bounds copy, where the host has room for it (a quarter of its memory left free).
    if (options_.fusions.bounded_head_pick) cpu->prepare_head_pick(weights.text.lm_head);
    adopt(std::move(cpu), nullptr, std::move(weights), BackendKind::Cpu, fallback, std::nullopt);
    held_policy_ = weight_policy_;
  }
  // place(); should it fail after the old model made room for the new one, the old placement is loaded again before
  // the error goes on, so the engine still answers as it did.
  void place_or_restore(const std::string& device, const EngineOptions& previous) {
    try {
      place(device);
    } catch (...) {
      options_ = previous;
      if (!backend_) place(previous.device);
      throw;
    }
  }
  void release_model() {
    conversations_.clear();  // their caches live in the backends
    vision_features_.clear();
    vision_tower_.forget();
    weights_ = {};  // the weights go before their backends
    backend_.reset();
    host_.reset();
    plan_.reset();
  }
  void adopt(std::unique_ptr<Backend> backend, std::unique_ptr<Backend> host, ModelWeights weights, BackendKind kind,
             std::string fallback, std::optional<MemoryPlan> plan) {
    model_.checkpoint.check_unchanged();  // a file truncated while it was read gave zeros: refuse what was loaded
    conversations_.clear();  // kept in the old backends
    vision_features_.clear();  // computed by them
    vision_tower_.forget();
    weights_ = {};  // the old weights go before their backends
    backend_ = std::move(backend);
    host_ = std::move(host);
    for (Backend* be : backends()) be->set_fusions(options_.fusions);
    weights_ = std::move(weights);
    kind_ = kind;
    fallback_reason_ = std::move(fallback);
    plan_ = std::move(plan);
    conversations_.set_budget(conversation_budget());  // on a GPU within the plan's KV room
  }

  // Conversations kept on a GPU share the pool with the plan's KV room: together they never take more than it.
  uint64_t conversation_budget() const {
    uint64_t budget = options_.conversation_cache_bytes;
    if (plan_) budget = std::min(budget, kv_bytes_per_token() * uint64_t(std::max<int64_t>(0, plan_->context_room)));
    return budget;
  }
  uint64_t kv_bytes_per_token() const {  // keys and values of every layer, in each part's cache type
    uint64_t bytes = 0;
    for (const DecoderPart& part : decoder_parts())
      bytes += qvl::kv_bytes_per_token(model_.config.text, part.end_layer - part.first_layer, part.backend->cache_type());
    return bytes;
  }
  // The most positions a request may hold: the options', the model's, and on a GPU the memory plan's.
  int64_t context_limit() const {
    int64_t limit = std::min(options_.max_context, model_.config.text.max_position_embeddings);
    return plan_ ? std::min(limit, plan_->context_room) : limit;
  }

  // Only the CPU reads weights from the mapped files after loading (a GPU holds its copies): a model wholly on the GPU
  // is not failed because another program touched its files. One fstat a file a token (3 ns measured on the
  // development machine).
  void check_mapped_weights() const {
    if (kind_ != BackendKind::Cuda || host_) model_.checkpoint.check_unchanged();
  }

  // The backends in use: the main one, and the CPU beside a GPU for the parts the plan leaves off it.
  std::vector<Backend*> backends() const {
    std::vector<Backend*> out;
    if (backend_) out.push_back(backend_.get());  // none after a failed move whose restore failed too
    if (host_) out.push_back(host_.get());
    return out;
  }
  Backend& vision_backend() const { return plan_ && !plan_->vision_on_gpu ? *host_ : *backend_; }
  std::vector<DecoderPart> decoder_parts() const {
    const int64_t layers = model_.config.text.num_hidden_layers;
    if (!plan_ || !plan_->decoder_split()) return {DecoderPart{backend_.get(), 0, layers}};
    std::vector<DecoderPart> parts;
    if (plan_->gpu_layers > 0) parts.push_back({backend_.get(), 0, plan_->gpu_layers});
    parts.push_back({host_.get(), plan_->gpu_layers, layers});  // with no layers when only the head is on the CPU
    return parts;
  }

  // One request, phase by phase: images, prompt, vision tower, prefill, decode.
  void run(const GenerateRequest& request, TokenSink* sink, const std::atomic<bool>* cancel, GenerateResult& result) {
    // The CPU reads weights from the mapped files: one written or cut short since loading fails the request by name.
    check_mapped_weights();
    if (request.max_new_tokens <= 0) fail("max_new_tokens must be positive");
    // Checked before any sum (2^63 - 1 once wrapped negative); a ceiling is cut to the context below instead.
    if (request.max_new_tokens > options_.max_context && !request.answer_fits_context)
      fail("max_new_tokens ", request.max_new_tokens, " is over the context limit of ", options_.max_context);
    const std::size_t images_in_prompt = count_images(request.messages);
    if (images_in_prompt != request.images.size())
      fail("the conversation has ", images_in_prompt, " images but ", request.images.size(), " were given");
    if (int64_t(images_in_prompt) > options_.max_images)
      fail("the conversation has ", images_in_prompt, " images, over the limit of ", options_.max_images, " a request");
    auto t0 = Clock::now();
    // From the images' headers: nothing is decoded before the checks below.
    PromptCount prompt = count_prompt(*tokenizer_, preprocessor_, TokenId(model_.config.image_token_id), request);
    const std::vector<int64_t>& tokens_per_image = prompt.tokens_per_image;
    // The images go through the vision tower as one batch: within the budget, the plan has room for this many tokens.
    if (const int64_t total = std::accumulate(tokens_per_image.begin(), tokens_per_image.end(), int64_t(0));
        plan_ && plan_->vision_on_gpu && total > plan_->image_room)
      fail("the request's images take ", total, " tokens in one pass of the vision tower; the GPU's memory plan has "
           "room for ", plan_->image_room, ": send fewer or smaller images (--image-max-tokens)");
    result.prompt_ids = std::move(prompt.ids);
    const auto prompt_len = int64_t(result.prompt_ids.size());
    const ModelConfig& config = model_.config;
    const int64_t context_limit = std::min(options_.max_context, config.text.max_position_embeddings);
    int64_t max_new_tokens = std::min(request.max_new_tokens, options_.max_context);
    if (request.answer_fits_context) {  // a ceiling: the answer gets what the context leaves, if anything
      const int64_t room = std::min(context_limit, plan_ ? plan_->context_room : context_limit) - prompt_len;
      if (room >= 1) max_new_tokens = std::min(max_new_tokens, room);
    }
    const int64_t needed = prompt_len + max_new_tokens;
    if (needed > context_limit)
      fail("the prompt has ", prompt_len, " tokens; with ", max_new_tokens, " new tokens that is ", needed,
           ", over the context limit of ", context_limit);
    if (plan_ && needed > plan_->context_room)  // before the KV cache is allocated: the pool would refuse it later
      fail("the conversation needs ", needed, " tokens of context; the GPU's memory plan (", plan_->summary(),
           ") has room for ", plan_->context_room, ": shorten it, or plan for more context (fewer layers stay on the GPU)");
    Sampler sampler(request.sampling, tokenizer_->vocab_size());  // bad options refused before a kept cache is touched
    // A kept conversation serves the prompt's first tokens when they are the ones it holds (images by content).
    std::vector<uint64_t> image_keys;
    std::optional<CachedConversation> kept;
    ReusablePrefix reuse;
    if (!request.conversation_id.empty()) {
      for (const ImageInput& image : request.images) image_keys.push_back(image.content_key());
      kept = conversations_.take(request.conversation_id);
      if (kept) reuse = reusable_prefix(*kept, result.prompt_ids, image_keys, int32_t(config.image_token_id));
    }
    const std::vector<DecoderPart> parts = decoder_parts();
    const std::vector<uint64_t> feature_keys = features_keys(request.images, prompt.preprocessor);
    const ImageTokens image_tokens{tokens_per_image, kept_features(feature_keys, tokens_per_image)};
    CacheChoice choice = choose_cache(!request.conversation_id.empty(), kept, reuse, needed, parts, image_tokens);
    std::unique_ptr<KvCache> cache;
    try {
      if (kept) result.image_grids.assign(kept->image_grids.begin(), kept->image_grids.begin() + std::ptrdiff_t(reuse.images));
      NewImages images =
          prepare_images(request.images, reuse.images, tokens_per_image, feature_keys, prompt.preprocessor, cancel, result);
      result.timing.preprocess_ms = ms_since(t0);

      t0 = Clock::now();
      VisionSpan tower;
      const VisionInjection vision = encode_vision(images, result, reuse.tokens, cancel, tower);
      // Until the prefill's first token says how long the tower's work took (below): the host's time to queue it.
      result.timing.vision_ms = ms_since(t0);
      const Clock::time_point vision_began = t0;

      t0 = Clock::now();
      const PromptPositions positions = multimodal_positions(result.prompt_ids, config, result.image_grids);
      cache = make_cache(choice, reuse, parts);
      TextDecoder decoder(parts, config, weights_.text, options_.cuda_graphs, options_.attention_window);
      decoder.set_stop_flag(cancel);
      decoder.set_step_pick(step_pick(sampler, request, *parts.back().backend, weights_.text.lm_head.rows()));
      // On a GPU the prompt runs in passes of the plan's chunk (the planned context, or 512 tokens where a pass that
      // long does not fit), so the activations stay within what the plan counted; each chunk attends to the keys
      // cached before it, which gives the whole pass's answer (with --attention-window, a last chunk under 16 tokens
      // attends densely: close to it, not bit for bit).
      const int64_t chunk = plan_ ? plan_->prefill_chunk : prompt_len;
      Tensor logits;
      for (int64_t begin = reuse.tokens; begin < prompt_len; begin += chunk) {
        const int64_t end = std::min(prompt_len, begin + chunk);
        auto [cos, sin] = text_rope_tables(config.text, positions.axes, std::size_t(begin), std::size_t(end - begin));
        const VisionInjection share = vision.rows(begin, end);
        logits = decoder.forward(std::span(result.prompt_ids).subspan(std::size_t(begin), std::size_t(end - begin)), cos,
                                 sin, share.positions.empty() ? nullptr : &share, *cache);
      }
      result.timing.prefill_ms = ms_since(t0);
      // A device runs the tower while the host prepares and queues the prefill (nothing waits between them): the
      // vision time is the tower's own span where it ran, the prefill's the rest of the way to the first token.
      if (tower.backend) {
        result.timing.vision_ms = tower.backend->elapsed_ms(tower.start, tower.end);
        result.timing.vision_replayed = vision_tower_.replayed_last();
        result.timing.prefill_ms = std::max(0.0, ms_since(vision_began) - result.timing.vision_ms);
      }
      result.timing.prompt_tokens = prompt_len;
      result.timing.cached_tokens = reuse.tokens;
      if (sink) sink->on_prompt_done(result.timing);

      t0 = Clock::now();
      decode(request, max_new_tokens, decoder, sampler, *cache, positions.delta, std::move(logits), sink, cancel, result);
      result.timing.decode_ms = ms_since(t0);
      keep_conversation(request.conversation_id, std::move(cache), image_keys, result);
      keep_image_features(images, vision);
      record_vision_tower(tower.backend);
    } catch (const Cancelled&) {
      // Stopped before the answer: the conversation keeps what its cache validly holds. Before the cache was made,
      // the kept one is untouched (its own ids); after, the prompt's tokens up to the last whole prefill pass.
      if (cache) keep_conversation(request.conversation_id, std::move(cache), image_keys, result);
      else if (kept && choice.kept) {
        kept->cache = std::move(choice.kept);
        conversations_.put(request.conversation_id, std::move(*kept));
      }
      throw;
    }
    if (profiler_) {
      for (Backend* be : backends()) be->collect_timings(true);
      profiler_->publish();
    }
    result.timing.generated_tokens = int64_t(result.generated_ids.size());
  }

  // Merged tokens of each of a request's images, and of those the tower would encode (0 where the features are kept).
  struct ImageTokens {
    std::vector<int64_t> all, encoded;
  };
  // How this request gets its KvCache, decided before the vision tower (which may undo the prefix's reuse) and carried
  // out after it (the plan counts the vision pass's activations and the KV cache at different moments: a cache made
  // before the pass would sit beside it).
  struct CacheChoice {
    std::unique_ptr<KvCache> kept;  // the conversation's cache, to truncate in place or to copy the prefix from
    int64_t capacity = 0;           // of a new cache; 0: the kept one, truncated in place
  };
  // A kept conversation's cache serves the prefix when it is made for these parts; too small for the request, when
  // the budget holds it and a grown one together; and on a GPU when the pool holds it beside the request's passes
  // (pool_room). Else the prefix is computed again, its images with it. A conversation's new cache leaves room for
  // the next turn: up to the next multiple of 512 positions. The other kept conversations make room, least recently
  // used first: within the budget, and on a GPU within the pool's room beside the passes.
  CacheChoice choose_cache(bool keep, std::optional<CachedConversation>& kept, ReusablePrefix& reuse, int64_t needed,
                           const std::vector<DecoderPart>& parts, const ImageTokens& image_tokens) {
    CacheChoice choice;
    choice.kept = kept ? std::move(kept->cache) : nullptr;
    if (choice.kept && choice.kept->parts() != parts) choice.kept.reset();
    const int64_t grown = keep ? std::max(needed, std::min((needed + 511) / 512 * 512, context_limit())) : needed;
    const auto kept_pool_bytes = [&](const CachedConversation& c) {
      return c.cache ? pool_bytes(c.cache->capacity()) : 0;
    };
    for (;;) {  // three times at most: once more when the recorded tower gives way, once when the kept cache does
      if (!choice.kept) reuse = {};
      choice.capacity = choice.kept && choice.kept->capacity() >= needed ? 0 : grown;
      const uint64_t bytes = choice.capacity ? kv_bytes_per_token() * uint64_t(choice.capacity) : 0;
      const std::optional<PoolRoom> room = pool_room(reuse, image_tokens);
      const uint64_t own = choice.kept && room ? pool_bytes(choice.kept->capacity()) : 0,
                     fresh = choice.capacity && room ? pool_bytes(choice.capacity) : 0;
      // The recorded vision tower holds memory the plan does not count (what its peak leaves). It gives way first:
      // to this request's caches and to every conversation kept (one saves a whole prefill; the tower ~0.6 ms a
      // picture of its size).
      if (room && vision_tower_.held_bytes() > 0) {
        const uint64_t beside = vision_tower_.held_bytes() + own + conversations_.measured(kept_pool_bytes);
        if (beside > room->beside_vision_pass || beside + fresh > room->beside_prefill) {
          vision_tower_.forget();
          continue;
        }
      }
      if (choice.kept && (bytes + choice.kept->bytes() > conversations_.budget() ||  // not both at once
                          (room && (own > room->beside_vision_pass || own + fresh > room->beside_prefill)))) {
        choice.kept.reset();
        continue;
      }
      conversations_.make_room(choice.capacity ? bytes + (choice.kept ? choice.kept->bytes() : 0) : 0);
      if (room) {
        const uint64_t prefill_left = room->beside_prefill > own + fresh ? room->beside_prefill - own - fresh : 0;
        conversations_.evict_down_to(std::min(room->beside_vision_pass - own, prefill_left), kept_pool_bytes);
      }
      return choice;
    }
  }
  // What the GPU's pool leaves for KV caches (pool bytes) beside this request's passes: the vision pass over the
  // images past the reused prefix (when the plan puts the tower on the GPU), where the caches kept before the request
  // are there; and the prefill with those images' features alive, where the request's new cache is there too (beside
  // the kept one it copies its prefix from). The plan counts its KV room for one cache beside the largest image; a
  // kept conversation is one more cache. nullopt: no pool holds the caches (the CPU).
  struct PoolRoom {
    uint64_t beside_vision_pass = UINT64_MAX, beside_prefill = 0;
  };
  std::optional<PoolRoom> pool_room(const ReusablePrefix& reuse, const ImageTokens& tokens) const {
    if (!plan_ || plan_->gpu_layers == 0) return std::nullopt;
    const auto past_prefix = [&](const std::vector<int64_t>& v) {
      return std::accumulate(v.begin() + std::ptrdiff_t(reuse.images), v.end(), int64_t(0));
    };
    PoolRoom room;
    const int64_t encoded = past_prefix(tokens.encoded);
    if (plan_->vision_on_gpu && encoded > 0) room.beside_vision_pass = plan_->room_beside_vision_pass(encoded);
    room.beside_prefill = plan_->room_beside_prefill(past_prefix(tokens.all));
    return room;
  }
  // The tower this request ran op by op, recorded for the next pictures of its sizes: after the answer, since the
  // GPU would wait for the recording. Best effort: a recording that fails (the pool's memory) costs only the
  // replays, and nothing of it is held; a device error it meets fails the next request, as it would anyway.
  // `be`: where the tower ran (none: it did not).
  void record_vision_tower(Backend* be) noexcept {
    if (!be) return;
    try {
      vision_tower_.record_pending(*be, model_.config, weights_.vision, tower_hold_limit(*be));
    } catch (const std::exception&) {
    }
  }
  // Bytes a recorded vision tower may hold on `be` (RecordedVisionTower): within what the plan leaves unused at its
  // peak, and a sixteenth of the budget at most, so that the ~0.6 ms a replay saves a 448² picture does not take a
  // small card's memory (the 2B's tower holds 89 MiB of the pool's blocks for one such picture in bf16; with q4
  // weights 846 MiB as requests rounded, each product's widened copy kept: docs/memory-plan.md); 0 (none recorded) with CUDA graphs off or the tower off the
  // plan's GPU.
  uint64_t tower_hold_limit(const Backend& be) const {
    if (!options_.cuda_graphs || !plan_ || !plan_->vision_on_gpu || &be != backend_.get()) return 0;
    return std::min(plan_->budget > plan_->gpu_peak ? plan_->budget - plan_->gpu_peak : 0, plan_->budget / 16);
  }
  // The tokens each image would take through the tower: 0 where its features are kept (as prepare_images finds them).
  std::vector<int64_t> kept_features(const std::vector<uint64_t>& keys, const std::vector<int64_t>& tokens_per_image) const {
    std::vector<int64_t> encoded = tokens_per_image;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (usable(vision_features_.peek(keys[i]), tokens_per_image[i])) encoded[i] = 0;
    return encoded;
  }
  // Kept features serve an image whose header gives the token count they were made for.
  const ImageFeatures* usable(const ImageFeatures* kept, int64_t tokens) const {
    return kept && grid_tokens(kept->grid) == tokens ? kept : nullptr;
  }
  int64_t grid_tokens(const ImageGrid& g) const {
    return g.t * g.h * g.w / (model_.config.vision.spatial_merge_size * model_.config.vision.spatial_merge_size);
  }
  // A KV cache of `capacity` positions as the pool places it (the GPU's layers; plan_ set).
  uint64_t pool_bytes(int64_t capacity) const {
    return kv_cache_pool_bytes(model_.config.text, plan_->gpu_layers, capacity, backend_->cache_type());
  }
  std::unique_ptr<KvCache> make_cache(CacheChoice& choice, const ReusablePrefix& reuse, const std::vector<DecoderPart>& parts) {
    if (choice.capacity == 0) {
      choice.kept->truncate(reuse.tokens);
      choice.kept->forget_recorded_steps();  // recorded with the kernels of their request (fusions, timing)
      return std::move(choice.kept);
    }
    auto cache = std::make_unique<KvCache>(parts, model_.config.text, choice.capacity);
    if (choice.kept && reuse.tokens > 0) cache->copy_prefix_from(*choice.kept, reuse.tokens);
    choice.kept.reset();
    return cache;
  }

  // The conversation kept for the next request: the tokens its cache now holds (the prompt and every answer token
  // fed back; the last one sampled was never run) and its images.
  void keep_conversation(const std::string& id, std::unique_ptr<KvCache> cache, std::vector<uint64_t> image_keys,
                         const GenerateResult& result) {
    if (id.empty()) return;
    CachedConversation kept;
    const auto held = std::size_t(cache->length()), prompt = result.prompt_ids.size();
    kept.ids.assign(result.prompt_ids.begin(), result.prompt_ids.begin() + std::ptrdiff_t(std::min(held, prompt)));
    if (held > prompt)
      kept.ids.insert(kept.ids.end(), result.generated_ids.begin(), result.generated_ids.begin() + std::ptrdiff_t(held - prompt));
    kept.image_keys = std::move(image_keys);
    kept.image_grids = result.image_grids;
    cache->forget_recorded_steps();  // a graph and its buffers, uncounted in the budget, never replayed again
    kept.cache = std::move(cache);
    conversations_.put(id, std::move(kept));
  }

  // Where the vision tower's work of a request ran, between two marks of that backend's queue (Backend::mark).
  struct VisionSpan {
    Backend* backend = nullptr;  // none: no image was encoded
    QueueMark start, end;
  };

  // The images past a kept conversation's prefix, in prompt order: each one's features kept by content
  // (vision_features_), or its patches for the tower.
  struct NewImages {
    std::vector<std::optional<ImageFeatures>> kept;  // one an image; nullopt: encoded in this request
    std::vector<Tensor> patches;                 // of those encoded, in order
    std::vector<ImageGrid> grids;                // and their grids
    std::vector<int64_t> tokens;                 // merged tokens of every image
    std::vector<uint64_t> keys;                  // and its key in vision_features_ (features_keys)
  };
  // A picture's features depend on its content and on its size after preprocessing, which the request's token
  // budget sets (the model's other preprocessing settings are the engine's): the key holds both.
  // Each image's key, computed once a request (empty where the store keeps nothing: no picture is hashed for it).
  std::vector<uint64_t> features_keys(const std::vector<ImageInput>& images, const PreprocessorConfig& preprocessor) const {
    std::vector<uint64_t> keys;
    if (vision_features_.budget() == 0) return keys;
    const int64_t budget[2] = {preprocessor.min_pixels, preprocessor.max_pixels};
    for (const ImageInput& image : images) keys.push_back(content_hash(std::as_bytes(std::span(budget)), image.content_key()));
    return keys;
  }
  // Images from `first` on: kept features where the store has the picture (and the same token count the header
  // gives), else patches on the backend (a GPU cuts image i while the host decodes and resizes image i + 1), one
  // decoded image held at a time; their grids are appended to the result's.
  NewImages prepare_images(const std::vector<ImageInput>& images, std::size_t first,
                           const std::vector<int64_t>& tokens_per_image, const std::vector<uint64_t>& feature_keys,
                           const PreprocessorConfig& preprocessor, const std::atomic<bool>* stop, GenerateResult& result) {
    NewImages out;
    for (std::size_t i = first; i < images.size(); ++i) {
      stop_if_requested(stop);
      const uint64_t key = feature_keys.empty() ? 0 : feature_keys[i];
      out.keys.push_back(key);
      const ImageFeatures* hit = feature_keys.empty() ? nullptr : usable(vision_features_.find(key), tokens_per_image[i]);
      if (hit) {
        out.kept.push_back(*hit);
        out.tokens.push_back(tokens_per_image[i]);
        result.image_grids.push_back(hit->grid);
        ++result.timing.cached_images;
        continue;
      }
      const PreprocessedImage p = preprocess_image(*images[i].pixels(), preprocessor);
      out.kept.push_back(std::nullopt);
      out.tokens.push_back(grid_tokens(p.grid));
      out.grids.push_back(p.grid);
      out.patches.push_back(patches(vision_backend(), p));
      result.image_grids.push_back(p.grid);
    }
    return out;
  }

  // The vision tower over the images to encode in one batch, and where the features of all the new images go in the
  // prompt: the image tokens from `first_token` on (those before it are a kept conversation's). Kept features join
  // the encoded ones in prompt order on the host (only when some were kept: otherwise the tower's output is used as
  // it is). The patches are released once encoded: the plan counts the features beside the prefill, not them.
  // `tower`: marks around the tower's work, when it ran (the host does not wait for it here).
  VisionInjection encode_vision(NewImages& images, const GenerateResult& result, int64_t first_token,
                                const std::atomic<bool>* stop, VisionSpan& tower) {
    VisionInjection vision;
    if (images.kept.empty()) return vision;
    Backend& be = vision_backend();
    VisionOutput v;
    if (!images.patches.empty()) {
      tower = {&be, be.mark(), {}};  // from the patches' stacking on
      v = vision_tower_.encode(be, model_.config, weights_.vision, stack_rows(be, images.patches), images.grids, stop);
      tower.end = be.mark();
    }
    vision.backend = &be;
    if (images.patches.size() == images.kept.size()) {
      vision.embeddings = std::move(v.embeddings);
      vision.deepstack = std::move(v.deepstack);
    } else {
      const bool encoded = !images.patches.empty();
      vision.embeddings = joined(be, images, encoded ? &v.embeddings : nullptr,
                                 [](const ImageFeatures& f) -> const Tensor& { return f.embeddings; });
      for (std::size_t d = 0; d < model_.config.vision.deepstack_visual_indexes.size(); ++d)
        vision.deepstack.push_back(joined(be, images, encoded ? &v.deepstack[d] : nullptr,
                                          [d](const ImageFeatures& f) -> const Tensor& { return f.deepstack[d]; }));
    }
    images.patches.clear();
    for (auto i = std::size_t(first_token); i < result.prompt_ids.size(); ++i)
      if (result.prompt_ids[i] == model_.config.image_token_id) vision.positions.push_back(int64_t(i));
    return vision;
  }

  // One part of the new images' features (the embeddings, or a DeepStack block's) in prompt order: kept images' rows
  // from their host copies, encoded ones' from `encoded` (the tower's output for them, in order), joined on the host
  // and sent to `be`.
  Tensor joined(Backend& be, const NewImages& images, const Tensor* encoded,
                const std::function<const Tensor&(const ImageFeatures&)>& part) const {
    Tensor rows = encoded ? be.to_host(*encoded) : Tensor();
    if (encoded && rows.dtype() != DType::F32) rows = rows.to(DType::F32);  // the backend's activation type
    const int64_t width = model_.config.text.hidden_size;
    Tensor host = Tensor::empty(DType::F32, {std::accumulate(images.tokens.begin(), images.tokens.end(), int64_t(0)), width});
    int64_t at = 0, from_encoded = 0;
    for (std::size_t j = 0; j < images.kept.size(); ++j) {
      const int64_t n = images.tokens[j];
      const float* src = images.kept[j] ? part(*images.kept[j]).data<float>() : rows.data<float>() + from_encoded * width;
      if (!images.kept[j]) from_encoded += n;
      std::copy_n(src, n * width, host.data<float>() + at * width);
      at += n;
    }
    return be.from_host(host);
  }

  // The features of the images this request encoded, kept by content for later requests (after the answer: a GPU's
  // copy to the host is not in the time to first token).
  // Best effort: the answer is complete, and a store that could not take them (the host's memory) costs only a
  // later encoding.
  void keep_image_features(const NewImages& news, const VisionInjection& vision) noexcept {
    const bool encoded_any = std::any_of(news.kept.begin(), news.kept.end(), [](const auto& k) { return !k; });
    if (vision_features_.budget() == 0 || !encoded_any) return;
    try {
      Backend& be = *vision.backend;
      const Tensor embeddings = be.to_host(vision.embeddings);
      std::vector<Tensor> deepstack;
      for (const Tensor& t : vision.deepstack) deepstack.push_back(be.to_host(t));
      int64_t at = 0;
      std::size_t encoded = 0;
      for (std::size_t j = 0; j < news.kept.size(); ++j) {
        const int64_t n = news.tokens[j];
        if (!news.kept[j]) {
          ImageFeatures features{news.grids[encoded++], embeddings.slice_rows(at, at + n).to(DType::F32), {}};
          for (const Tensor& t : deepstack) features.deepstack.push_back(t.slice_rows(at, at + n).to(DType::F32));
          vision_features_.put(news.keys[j], std::move(features));
        }
        at += n;
      }
    } catch (const std::exception&) {
    }
  }

  // Sample, stream, stop or step: one token at a time from the prefill's logits.
  void decode(const GenerateRequest& request, int64_t max_new_tokens, TextDecoder& decoder, Sampler& sampler,
              KvCache& cache, int64_t rope_delta, Tensor logits, TokenSink* sink, const std::atomic<bool>* cancel,
              GenerateResult& result) {
    StreamingDetokenizer detok(tokenizer_, true);
    std::vector<int32_t> history = result.prompt_ids;
    const auto& eos = model_.generation.eos_token_ids;
    result.stop_reason = "max_new_tokens";
    AttentionTapper tapper(decoder,
                           latest_image_tokens(result.prompt_ids, int32_t(model_.config.image_token_id),
                                               result.image_grids, model_.config.vision.spatial_merge_size),
                           model_.config.text.num_hidden_layers, model_.config.text.num_attention_heads);
    const bool picked_on_backend = decoder.step_pick().on();
    bool queued_next = false;  // the step for the next token is queued already (decoding ahead)
    for (int64_t step = 0; step < max_new_tokens; ++step) {
      check_mapped_weights();  // before a token computed from a truncated file's zeros is shown
      const auto timed = [&](auto&& pick) {
        const auto began = Clock::now();
        const int32_t id = pick();
        result.timing.sample_ms += ms_since(began);
        return id;
      };
      int32_t next = 0;
      if (logits.dtype() == DType::I64) {  // a decode step's pick made on the backend (the prompt's are logits)
        next = timed([&] {
          const int64_t* pick = logits.data<int64_t>();
          if (decoder.step_pick().top_k == 0) return sampler.take_pick(pick[0], pick[1] != 0);
          const TopKResult found = TextDecoder::candidates(logits);
          if (!found.fitted && !found.nan) fail("decode: top-k's candidates did not fit and no logits came back");
          return sampler.next_from_candidates(found.candidates, found.nan);
        });
      } else {  // the prompt's logits, or a step's whose top-k candidates did not fit
        // Sampled where they lie (the step's own host copy): a copy of the 2B model's 151,936 scores cost 30-60 µs.
        const std::span<float> scores(logits.data<float>(), std::size_t(logits.numel()));
        if (step == 0) {
          result.first_step_top = top_logits(scores, 20);
          if (request.keep_step_logits) result.first_step_logits.assign(scores.begin(), scores.end());
        }
        next = timed([&] { return sampler.next(scores, history, result.prompt_ids.size()); });
        if (request.keep_step_logits && step > 0) result.last_step_logits.assign(scores.begin(), scores.end());
      }
      // The step queued for the token picked on the device is this token's (a sampled draw differs only where exp's
      // last bit did on the device): else it is dropped, and this token's queued below.
      if (queued_next && next != decoder.picked_on_device(logits)) {
        decoder.drop_queued_steps();
        queued_next = false;
        ++result.timing.steps_redone;
      }
      history.push_back(next);
      result.generated_ids.push_back(next);
      const bool stop = !request.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end();
      const std::string piece = detok.push(next);
      result.text += piece;
      if (sink) sink->on_token(next, piece);
      if (profiler_) {
        for (Backend* be : backends()) be->collect_timings(false);
        profiler_->publish();
      }
      if (stop) {
        result.stop_reason = "eos";
        break;
      }
      if (cancel && cancel->load()) {
        result.stop_reason = "cancelled";
        break;
      }
      if (step + 1 == max_new_tokens) break;
      const auto rope_here = [&] { return decode_rope_tables(model_.config.text, cache.length() + rope_delta, 1); };
      const int32_t id = next;
      tapper.follow(unpack_view(view_.load()));
      bool ran_ahead = false;  // a queued step carries no tap, even where the view has just asked for one
      try {
        if (queued_next || decoder.can_queue_steps(cache)) {
          ran_ahead = true;
          // Decoding ahead (TextDecoder::queue_step): the step for `next` (queued last time round, its token the pick
          // on the device, or now), then the one after it before this one's pick is read.
          if (!queued_next) decoder.queue_step(id, rope_delta, cache, sampler.draw_state());
          queued_next = step + 2 < max_new_tokens && decoder.can_queue_steps(cache);  // (queue_step checks the room)
          if (queued_next) {
            decoder.queue_step(TextDecoder::kPickedOnDevice, rope_delta, cache);
            ++result.timing.steps_ahead;
          }
          logits = decoder.take_step(cache);
          if (!logits.numel()) {  // top-k's candidates did not fit: this step again, handing back its logits
            queued_next = false;
            ++result.timing.steps_redone;
            const auto [c, s] = rope_here();
            logits = decoder.forward(std::span<const int32_t>(&id, 1), c, s, nullptr, cache, TextDecoder::Returns::Pick);
          }
        } else {
          const auto [c, s] = rope_here();
          logits = decoder.forward(std::span<const int32_t>(&id, 1), c, s, nullptr, cache,
                                   picked_on_backend ? TextDecoder::Returns::Pick : TextDecoder::Returns::Logits);
        }
      } catch (const Cancelled&) {  // stopped inside the step: the answer ends with the tokens shown
        result.stop_reason = "cancelled";
        break;
      }
      if (sink && !ran_ahead) tapper.deliver(*sink, step);
      ++result.timing.decode_steps;
    }
    decoder.drop_queued_steps();  // a step queued for a token after the answer's last: never taken
    const std::string tail = detok.finish();
    result.text += tail;
    if (sink && !tail.empty()) sink->on_token(-1, tail);
  }

public:
  void set_profiler(std::shared_ptr<Profiler> profiler) override {
    profiler_ = std::move(profiler);
    set_timing_sinks();
  }
  void set_timing_sinks() {
    for (Backend* be : backends()) be->set_timing_sink(profiler_.get());
  }

  std::shared_ptr<Profiler> profiler() const override { return profiler_; }

  double measure_read_bandwidth() override {
    if (!backend_) fail("no model is loaded");
    return backend_->measure_read_bandwidth();
  }
  std::optional<DeviceIdentity> device_identity() const override {
    return backend_ ? backend_->device_identity() : std::nullopt;
  }
  DeviceInterop* device_interop() override { return backend_ ? backend_->interop() : nullptr; }
  void set_attention_view(AttentionView view) override { view_ = pack_view(view); }
  MemoryReport memory_report(bool with_segment_map) const override {
    return backend_ ? backend_->memory_report(with_segment_map) : MemoryReport{};
  }

  void set_fusions(const Fusions& fusions) override {
    conversations_.clear();  // computed with the other kernels: a comparison must not reuse them
    vision_features_.clear();
    vision_tower_.forget();
    options_.fusions = fusions;
    for (Backend* be : backends()) be->set_fusions(fusions);
  }
  Fusions fusions() const override { return options_.fusions; }

  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  std::shared_ptr<const Tokenizer> shared_tokenizer() const override { return tokenizer_; }
  int64_t context_tokens() const override {
    const int64_t limit = std::min(options_.max_context, model_.config.text.max_position_embeddings);
    return plan_ ? std::min(limit, plan_->context_room) : limit;
  }
  const ModelFolder& model() const override { return model_; }
  const PreprocessorConfig& image_preprocessor() const override { return preprocessor_; }
  std::string device() const override { return backend_info(kind_).id; }
  BackendKind backend_kind() const override { return kind_; }
  std::string backend_name() const override { return backend_ ? backend_->name() : "none"; }
  std::string kv_cache() const override { return backend_ ? std::string(dtype_name(backend_->cache_type())) : "none"; }
  std::string weights() const override {
    return model_.config.quantization ? model_.config.quantization->name() : held_policy_.name;
  }
  uint64_t decode_weight_bytes(const GenerateRequest* request) const override {
    const TextWeights& t = weights_.text;
    const auto norm = [](const NormWeights& n) { return uint64_t(n.weight.nbytes() + n.bias.nbytes()); };
    const Backend& head = *decoder_parts().back().backend;
    const bool bounds = request && head.picks_from_bounds_of(t.lm_head) &&
                        step_pick(Sampler(request->sampling, tokenizer_->vocab_size()), *request, head,
                                  t.lm_head.rows()).on();
    uint64_t bytes = norm(t.final_norm) + (bounds ? head_bounds_bytes(t.lm_head.rows(), t.lm_head.cols()) : t.lm_head.nbytes());
    for (const DecoderLayerWeights& l : t.layers) {
      bytes += norm(l.input_norm) + norm(l.post_attention_norm) + norm(l.q_norm) + norm(l.k_norm);
      for (const LinearWeights* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) bytes += w->nbytes();
    }
    return bytes;
  }
  std::optional<MemoryPlan> memory_plan() const override { return plan_; }
  std::string fallback_reason() const override { return fallback_reason_; }
  std::string device_error() const override { return device_error_; }
  void forget_conversation(const std::string& id) override { conversations_.forget(id); }
  ConversationCacheStats conversation_cache() const override { return conversations_.stats(); }
  VisionCacheStats vision_cache() const override {
    VisionCacheStats stats = vision_features_.stats();
    stats.recorded_tower_bytes = vision_tower_.held_bytes();
    return stats;
  }
  void inject_fault(const FaultInjection& fault) override {
    if (backend_) backend_->inject_fault(fault);
  }

private:
  static std::vector<std::pair<int32_t, float>> top_logits(std::span<const float> logits, std::size_t k) {
    std::vector<int32_t> idx(logits.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i);
    k = std::min(k, idx.size());
    std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(), [&](int32_t a, int32_t b) {
      return logits[std::size_t(a)] != logits[std::size_t(b)] ? logits[std::size_t(a)] > logits[std::size_t(b)] : a < b;
    });
    std::vector<std::pair<int32_t, float>> out;
    for (std::size_t i = 0; i < k; ++i) out.emplace_back(idx[i], logits[std::size_t(idx[i])]);
    return out;
  }

  EngineOptions options_;
  WeightPolicy weight_policy_;  // as --weights names it ("auto": as stored until a GPU's plan chooses)
  WeightPolicy held_policy_;    // what the weights are held in now
  ModelFolder model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> host_;   // the CPU beside a GPU, for the parts the memory plan leaves off it
  std::optional<MemoryPlan> plan_;  // with a GPU only
  std::atomic<uint64_t> view_{pack_view({})};  // the AttentionView (set from any thread), one word
  ModelWeights weights_;
  PreprocessorConfig preprocessor_;
  std::string fallback_reason_;
  std::string device_error_;  // set once a GPU fault has made the CUDA backend unusable
  BackendKind kind_ = BackendKind::Cpu;
  std::shared_ptr<Profiler> profiler_;
  ConversationCache conversations_;  // after the backends: destroyed before them, as their caches live there
  VisionFeatureCache vision_features_;  // host copies: made by the backends' kernels, emptied when those change
  RecordedVisionTower vision_tower_;    // the tower recorded for the last picture size it ran op by op (forgotten as those)
};

}  // namespace

WeightPolicy weights_for(const ModelFolder& model, const std::string& weights, MemoryPlanRequest request) {
  if (weights != "auto") return WeightPolicy::from_name(weights);
  if (model.config.quantization) return {};  // a folder written by qvl quantize: as stored
  for (const char* name : {"bf16", "q8", "q4"}) {
    WeightPolicy candidate = WeightPolicy::from_name(name);
    request.formats = candidate.quantise;
    try {
      if (!plan_memory(model.config, request).decoder_split()) return candidate;
    } catch (const Error&) {  // not even one layer fits: a smaller format may
    }
  }
  return WeightPolicy::from_name("q4");
}

MemoryPlanRequest memory_plan_request(const ModelFolder& model, const EngineOptions& options, const Backend* gpu) {
  MemoryPlanRequest r;
  r.budget = options.device_memory_limit;
  r.context = std::min(options.plan_context, options.max_context);
  const PreprocessorConfig p = with_token_budget(model.preprocessor, options.image_min_tokens, options.image_max_tokens);
  r.image_tokens = p.max_pixels / std::max<int64_t>(1, p.patch_size * p.patch_size * p.merge_size * p.merge_size);
  r.checkpoint_floats = checkpoint_floats(model);
  if (gpu) {  // the budget is the pool's capacity as the backend was made, less what it holds already
    const MemoryReport pool = gpu->memory_report(false);
    r.budget = uint64_t(std::max<int64_t>(0, pool.capacity));
    r.reserved = uint64_t(std::max<int64_t>(0, pool.reserved));
    r.gpu_floats = gpu->weight_storage(r.checkpoint_floats);
    r.gpu_activations = gpu->activation_type();
    r.kv_cache = gpu->cache_type();
    r.gpu_narrows_product_inputs = gpu->limits().narrows_product_inputs;
  } else {  // the CUDA backend's own storage: f32 activations, the KV cache asked for; the SM61 profile keeps bf16 as f16
    r.gpu_activations = DType::F32;
    r.kv_cache = kv_cache_type(options.kv_cache, r.checkpoint_floats);
    r.gpu_floats = options.cuda_profile == "sm61" && r.checkpoint_floats == DType::BF16 ? DType::F16 : r.checkpoint_floats;
    r.gpu_narrows_product_inputs = options.cuda_profile != "sm61";
  }
  r.formats = model.config.quantization ? model.config.quantization : weights_for(model, options.weights, r).quantise;
  // The head's bounds copy, for a float head with the switch on at load (switched on later, the head is read whole).
  if (!r.formats && options.fusions.bounded_head_pick)
    r.head_bounds = head_bounds_bytes(model.config.text.vocab_size, model.config.text.hidden_size);
  return r;
}

std::unique_ptr<Engine> Engine::load(const std::filesystem::path& model_dir, const EngineOptions& options) {
  return load(ModelFolder::open(model_dir), options);
}

std::unique_ptr<Engine> Engine::load(ModelFolder model, const EngineOptions& options) {
  return std::make_unique<Qwen3VLEngine>(std::move(model), options);
}

}  // namespace qvl
