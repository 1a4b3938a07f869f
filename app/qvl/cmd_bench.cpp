// qvl bench: vision encode, prefill and decode speed of a model, with the memory-bandwidth roofline beside it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"

#include "backend/gpu_vitals.h"
#include "core/error.h"
#include "core/paths.h"
#include "io/model_folder.h"
#include "io/random_model.h"
#include "model/weights.h"
#include "qvl/args.h"
#include "qvl/bench_views.h"
#include "qvl/commands.h"
#include "qvl/gpu_options.h"
#include "runtime/engine.h"
#include "runtime/fusion_comparison.h"
#include "runtime/prompt_count.h"

namespace qvl::cli {

namespace {

// `base` with the fusions named in `names` (comma-separated, as Fusions::kSwitches names them) off.
Fusions fusions_without(const std::string& names, Fusions base) {
  std::size_t from = 0;
  while (from <= names.size()) {
    const std::size_t to = std::min(names.find(',', from), names.size());
    const std::string name = names.substr(from, to - from);
    const auto found = std::find_if(Fusions::kSwitches.begin(), Fusions::kSwitches.end(),
                                    [&](const auto& s) { return name == s.first; });
    if (found == Fusions::kSwitches.end()) {
      std::string known;
      for (const auto& [n, on] : Fusions::kSwitches) known += (known.empty() ? "" : ", ") + std::string(n);
      fail("qvl bench: --fusion-off: no fusion is named '", name, "' (known: ", known, ")");
    }
    base.*(found->second) = false;
    from = to + 1;
  }
  return base;
}

// A random-weight model of the preset's shapes, generated once into the user's cache folder.
std::filesystem::path preset_model(const std::string& preset, DType dtype) {
  const ModelConfig config = model_preset(preset);  // an unknown name fails before the cache is touched
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::filesystem::path cache = xdg && *xdg ? std::filesystem::path(xdg) : std::filesystem::path(home ? home : "/tmp") / ".cache";
  const auto dir = cache / "qvl" / "bench-models" / (preset + "-" + std::string(dtype_name(dtype)));
  // Two runs on an empty cache once both generated the model and collided: the second waits here for the first,
  // then finds its model.
  std::filesystem::create_directories(dir.parent_path());
  const FileLock lock(dir.string() + ".lock");
  if (!std::filesystem::exists(dir / "config.json")) {
    std::fprintf(stderr, "generating a random-weight %s model in %s ...\n", preset.c_str(), dir.c_str());
    RandomModelOptions options;
    options.dtype = dtype;
    options.tokenizer_dir = resource_dir() / "tokenizer";
    options.overwrite = true;
    write_random_model(config, dir, options);
  }
  return dir;
}

constexpr double kGtx1080Bandwidth = 320e9, kMx330Bandwidth = 48e9;  // bytes/s, the cards' DRAM peaks

nlohmann::json run_json(const FusionRun& run) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : run.kernels) kernels.push_back({{"name", k.name}, {"calls", k.calls}, {"total_ms", k.total_ms}});
  return {{"prefill_ms", run.timing.prefill_ms},
          {"decode_ms_per_token", run.timing.decode_ms / double(std::max<int64_t>(1, run.timing.decode_steps))},
          {"kernel_ms", run.kernel_ms}, {"kernels", kernels}};
}

nlohmann::json difference_json(const OutputDifference& d) {
  return {{"max_abs", d.max_abs}, {"relative_l2", d.relative_l2}, {"cosine", d.cosine}};
}

nlohmann::json comparison_json(const FusionComparison& c) {
  nlohmann::json out = {{"fusions", c.fusions},
                        {"without_kernel", c.without_kernel},
                        {"timed_runs", c.timed_runs},
                        {"unfused", run_json(c.unfused)},
                        {"fused", run_json(c.fused)},
                        {"first_step_logits", difference_json(c.difference)},
                        {"same_tokens", c.difference.same_tokens}};
  if (c.decode_difference) out["last_decode_step_logits"] = difference_json(*c.decode_difference);
  nlohmann::json each = nlohmann::json::array();
  for (const FusionEffect& e : c.each) {
    nlohmann::json one = {{"fusion", e.name},
                          {"first_step_logits", difference_json(e.difference)},
                          {"same_tokens", e.difference.same_tokens}};
    if (e.decode_difference) one["last_decode_step_logits"] = difference_json(*e.decode_difference);
    each.push_back(std::move(one));
  }
  out["each_fusion_alone"] = std::move(each);
  return out;
}

void print_comparison(const FusionComparison& c) {
  auto per_token = [](const FusionRun& r) { return r.timing.decode_ms / double(std::max<int64_t>(1, r.timing.decode_steps)); };
  std::string names;
  for (const auto& n : c.fusions) names += (names.empty() ? "" : ", ") + n;
  std::printf("\nfused vs unfused (%s; the median of %d runs each way, greedy):\n", names.c_str(), c.timed_runs);
  if (!c.without_kernel.empty()) {
    std::string without;
    for (const auto& n : c.without_kernel) without += (without.empty() ? "" : ", ") + n;
    std::printf("  not compared, no fused kernel on this device (it runs the reference either way): %s\n", without.c_str());
  }
  std::printf("  %-28s %12s %12s %9s\n", "", "unfused", "fused", "speed-up");
  std::printf("  %-28s %12.2f %12.2f %8.2fx\n", "prefill ms", c.unfused.timing.prefill_ms, c.fused.timing.prefill_ms,
              c.unfused.timing.prefill_ms / c.fused.timing.prefill_ms);
  std::printf("  %-28s %12.3f %12.3f %8.2fx\n", "decode ms/token", per_token(c.unfused), per_token(c.fused),
              per_token(c.unfused) / per_token(c.fused));
  std::printf("  %-28s %12.2f %12.2f %8.2fx\n", "kernel time ms (profiled)", c.unfused.kernel_ms, c.fused.kernel_ms,
              c.unfused.kernel_ms / c.fused.kernel_ms);
  std::printf("  first-step logits: max abs %.3g, relative L2 %.3g, cosine %.7f; greedy answers %s\n", c.difference.max_abs,
              c.difference.relative_l2, c.difference.cosine, c.difference.same_tokens ? "identical" : "DIFFER");
  if (const auto& d = c.decode_difference)
    std::printf("  last decode step's logits: max abs %.3g, relative L2 %.3g, cosine %.7f\n", d->max_abs, d->relative_l2,
                d->cosine);
  if (c.each.empty()) return;
  std::printf("\neach fusion alone against none (greedy; relative L2 and cosine of the logits):\n");
  std::printf("  %-22s %12s %12s %14s %12s  %s\n", "fusion", "first L2", "cosine", "last decode L2", "cosine", "answer");
  for (const FusionEffect& e : c.each) {
    std::printf("  %-22s %12.3g %12.7f", e.name.c_str(), e.difference.relative_l2, e.difference.cosine);
    if (e.decode_difference) std::printf(" %14.3g %12.7f", e.decode_difference->relative_l2, e.decode_difference->cosine);
    else std::printf(" %14s %12s", "-", "-");
    std::printf("  %s\n", e.difference.same_tokens ? "same" : "DIFFERS");
  }
}

void print_views(const nlohmann::json& v) {
  std::printf("views            decode %.2f tokens/s with both open, %.2f closed (%.3fx), medians of %lld each; on %s, %s\n",
              v["open_decode_tokens_per_s"].get<double>(), v["closed_decode_tokens_per_s"].get<double>(),
              v["open_over_closed"].get<double>(), (long long)v["repeats"].get<int64_t>(),
              v["vulkan_device"].get<std::string>().c_str(),
              v["from_cuda_memory"].get<bool>() ? "from CUDA memory"
                                                : ("from a host upload: " + v["host_upload_reason"].get<std::string>()).c_str());
  for (const char* name : {"pool_map", "attention"}) {
    const auto& s = v[name];
    std::printf("  %-14s %lld frames published (%lld dropped, %lld skipped), %lld drawn (%lld from CUDA memory); "
                "draw %.3f ms median, %.3f ms p99\n", name, (long long)s["frames_published"].get<int64_t>(),
                (long long)s["frames_dropped"].get<int64_t>(), (long long)s["frames_skipped"].get<int64_t>(),
                (long long)s["frames_drawn"].get<int64_t>(), (long long)s["frames_drawn_from_cuda_memory"].get<int64_t>(),
                s["draw_ms_median"].get<double>(), s["draw_ms_p99"].get<double>());
  }
  if (v.contains("validation_messages"))
    std::printf("  validation     %zu messages from the Vulkan validation layers%s%s\n", v["validation_messages"].size(),
                v["validation_messages"].empty() ? "" : "; the first: ",
                v["validation_messages"].empty() ? "" : v["validation_messages"][0].get<std::string>().c_str());
  if (v.contains("snapshots"))
    for (const auto& path : v["snapshots"]) std::printf("  snapshot       %s\n", path.get<std::string>().c_str());
}

void print_vitals(const nlohmann::json& v) {
  if (v.contains("unavailable")) {
    std::printf("gpu vitals       not read: %s\n", v["unavailable"].get<std::string>().c_str());
    return;
  }
  const nlohmann::json& s = v["summary"];
  if (s.empty()) return;
  std::string reasons;
  for (const auto& r : s["throttle_reasons_seen"]) reasons += (reasons.empty() ? "" : ", ") + r.get<std::string>();
  std::printf("gpu vitals       %s, %zu samples: SM %.0f MHz median (%.0f-%.0f; max %u), %u C at most, %.0f W at most "
              "of %.0f W; clocks held back by: %s%s\n", v["device"].get<std::string>().c_str(), v["samples"].size(),
              s["sm_clock_mhz_median"].get<double>(), s["sm_clock_mhz_min"].get<double>(), s["sm_clock_mhz_max"].get<double>(),
              s["max_sm_clock_mhz"].get<unsigned>(), s["temperature_c_max"].get<unsigned>(), s["power_w_max"].get<double>(),
              s["power_limit_w"].get<double>(), reasons.empty() ? "nothing" : reasons.c_str(),
              s["throttled"].get<bool>() ? " (THROTTLED: the numbers above are slower than the card can do)" : "");
}

// `tokens` tokens of text (at least one): " hello" is one token.
std::string hello_text(int64_t tokens) {
  std::string text;
  for (int64_t i = 0; i < std::max<int64_t>(1, tokens); ++i) text += " hello";
  return text;
}

// The tokens the model's chat template puts around the text of `request`'s last message (a user's, its text not yet
// added: <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n, and the end of the turn before it), counted with
// its own template and tokenizer: the prompt with one " hello" as that text, less the prompt without the message,
// less the " hello". The pictures are left out of both counts.
int64_t template_tokens(const Engine& engine, GenerateRequest request) {
  const auto count = [&](const GenerateRequest& r) {
    return int64_t(count_prompt(engine.tokenizer(), engine.image_preprocessor(),
                                TokenId(engine.model().config.image_token_id), r).ids.size());
  };
  request.images.clear();
  for (ChatMessage& m : request.messages)
    std::erase_if(m.content, [](const ContentItem& c) { return c.kind != ContentItem::Kind::Text; });
  ChatMessage message = std::move(request.messages.back());
  request.messages.pop_back();
  const int64_t before = request.messages.empty() ? 0 : count(request);
  message.content.push_back(ContentItem::make_text(hello_text(1)));
  request.messages.push_back(std::move(message));
  return count(request) - before - 1;
}

// A square test picture of `side` pixels, different for each `seed`.
RgbImage synthetic_image(int64_t side, int64_t seed) {
  RgbImage image{side, side, std::vector<uint8_t>(std::size_t(side * side * 3))};
  for (std::size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = uint8_t(((i + std::size_t(seed)) * 2654435761u) >> 24);
  return image;
}

// A second turn of `tokens` new tokens (after `new_images` new pictures) following `first` (its answer kept), in a
// conversation the engine keeps: its time to first token against its own vision pass and prefill (what the kept turn
// saves is everything else) and against the same turn computed whole. Medians of `repeat` conversations after one
// warm-up.
nlohmann::json time_follow_up(Engine& engine, const GenerateRequest& first, int64_t tokens,
                              const std::vector<RgbImage>& new_images, int64_t repeat) {
  std::vector<double> ttft, vision, prefill, whole;
  GenerateResult second;
  int64_t around = -1;  // the question's template tokens
  for (int64_t r = 0; r <= repeat; ++r) {
    GenerateRequest turn = first;
    turn.conversation_id = "bench-follow-up";
    engine.forget_conversation(turn.conversation_id);
    const GenerateResult answer = engine.generate(turn);
    turn.messages.push_back(ChatMessage::text("assistant", answer.text));
    ChatMessage question{"user", {}};
    for (const RgbImage& image : new_images) {
      turn.images.push_back(image);
      question.content.push_back(ContentItem::image());
    }
    turn.messages.push_back(std::move(question));
    if (around < 0) around = template_tokens(engine, turn);  // the same each time: the answers differ, not the template
    turn.messages.back().content.push_back(ContentItem::make_text(hello_text(tokens - around)));
    second = engine.generate(turn);
    turn.conversation_id.clear();
    const GenerateResult computed_whole = engine.generate(turn);
    if (r == 0) continue;
    const auto& t = second.timing;
    ttft.push_back(t.preprocess_ms + t.vision_ms + t.prefill_ms);
    vision.push_back(t.vision_ms);
    prefill.push_back(t.prefill_ms);
    whole.push_back(computed_whole.timing.preprocess_ms + computed_whole.timing.vision_ms + computed_whole.timing.prefill_ms);
  }
  engine.forget_conversation("bench-follow-up");
  return {{"new_tokens", second.timing.prompt_tokens - second.timing.cached_tokens},
          {"new_images", new_images.size()},
          {"cached_tokens", second.timing.cached_tokens},
          {"cached_images", second.timing.cached_images},
          {"time_to_first_token_ms", median(ttft)},
          {"vision_ms", median(vision)},
          {"prefill_ms", median(prefill)},
          {"time_to_first_token_over_prefill", median(ttft) / median(prefill)},
          {"whole_time_to_first_token_ms", median(whole)}};
}

}  // namespace

int run_bench(const std::vector<std::string>& argv) {
  std::string presets;
  for (const auto& p : model_preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder (default: the demo model, as generate and serve)"},
      {"preset", "NAME", "random weights with these shapes instead (" + presets + "); generated once, cached"},
      {"dtype", "TYPE", "weights of the generated preset model: bf16 (default), f16 or f32"},
      {"weights", "FORMAT", "hold the weights as stored (bf16, the default), quantised at load (" + WeightPolicy::quantised_names() +
                             "; -gN: groups of N), or auto (on a GPU: the most precise whose memory plan keeps the decoder there)"},
      {"no-graphs", "", "launch every decode kernel instead of replaying the recorded step (CUDA graphs)"},
      {"no-fusion", "", "run the unfused reference ops instead of the fused kernels"},
      {"fusion-off", "NAMES", "switch off these fusions, by their names in the report, comma-separated (e.g. \"head "
                              "bounds+pick\"): each against the rest"},
      {"attention-window", "N",
       "long contexts: prefill attention sees N blocks of 64 positions up to its own and the first block (0 = all, "
       "the default; an approximation)"},
      {"compare-fusion", "",
       "also run fused and unfused side by side: times, kernels, output difference (all fusions, and each alone)"},
      {"device", "NAME", "cpu (default) or cuda"},
      {"prompt-tokens", "N", "text tokens in the prompt, the chat template's among them (8 for Qwen3-VL; default 128)"},
      {"prompt", "TEXT", "this question instead of --prompt-tokens' generated text"},
      {"decode-tokens", "N", "tokens to generate (default 32)"},
      {"image-size", "N", "add an NxN image to the prompt (default: none)"},
      {"images", "N", "with --image-size: N such images in the prompt, encoded in one batch (default 1)"},
      {"image", "FILE", "add this picture to the prompt instead of --image-size's generated ones"},
      {"views", "", "also decode with qvl-studio's two Vulkan views open (the pool map, the attention over the picture; "
                    "drawn offscreen as the app draws them) against closed, and time their frames"},
      {"views-layer", "N", "with --views: the layer whose attention the view taps (default 0)"},
      {"views-snapshot", "DIR", "with --views: write the last frame of each view there (pool-map.ppm, attention.ppm)"},
      {"repeat", "N", "timed runs after one warm-up (default 3); medians are reported"},
      {"keep-prompt", "", "the runs share one conversation: the timed runs find the warm-up's keys and values of the "
                          "prompt kept and prefill only its last token, so decode at a long prompt's depth is timed "
                          "without prefilling it again (prefill and first token are then not the prompt's)"},
      {"follow-up-tokens", "N", "also time a second turn of N new tokens in the same conversation, its first turn kept "
                                "(and the same turn computed whole, for comparison)"},
      {"follow-up-images", "N", "the second turn also brings N new pictures of --image-size (default 0)"},
      {"vision-cache-mb", "N", "keep N MiB of image features between runs (default 0: every run encodes its pictures)"},
      {"temperature", "T", "sample at this temperature (default 0: greedy)"},
      {"top-k", "N", "with --temperature: keep the N most likely tokens (default 0: off)"},
      {"top-p", "P", "with --temperature: keep the smallest set with probability P (default 1: off)"},
      {"trace", "FILE", "write the profiled run as a Chrome trace (opens in Perfetto or chrome://tracing)"},
      {"json", "", "print one JSON object"},
      {"help", "", "show this help"},
  };
  const std::vector<OptionSpec> gpu_specs = gpu_option_specs();
  specs.insert(specs.end() - 1, gpu_specs.begin(), gpu_specs.end());  // before --help
  const auto parsed = parse_or_help("bench", "Measures vision, prefill and decode speed against the memory roofline.", argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  if (args.has("model") && args.has("preset")) fail("qvl bench: give one of --model or --preset, not both");
  if (args.has("dtype") && !args.has("preset"))
    fail("qvl bench: --dtype chooses the weights of --preset's generated model; a model folder has its own");
  const auto dtype = dtype_from_name(args.get("dtype", "bf16"));
  if (!dtype) fail("qvl bench: --dtype must be bf16, f16 or f32");
  const std::filesystem::path dir = args.has("preset") ? preset_model(args.get("preset"), *dtype)
                                                       : std::filesystem::path(args.get("model", default_model_dir().string()));
  const int64_t prompt_tokens = args.get_int("prompt-tokens", 128), decode_tokens = args.get_int("decode-tokens", 32),
                image_size = args.get_int("image-size", 0), repeat = args.get_int("repeat", 3),
                images = args.get_int("images", 1), follow_up_tokens = args.get_int("follow-up-tokens", 0);
  EngineOptions options;
  apply_gpu_options(args, options);
  if (follow_up_tokens < 0 || follow_up_tokens > options.max_context)
    fail("qvl bench: --follow-up-tokens takes 0 to ", options.max_context, " (--max-context)");
  if (decode_tokens < 2) fail("qvl bench: need --decode-tokens >= 2");
  if (args.has("image-size") && image_size < 1) fail("qvl bench: --image-size takes 1 or more (leave it out for no picture)");
  if (repeat < 1 || repeat > 1000) fail("qvl bench: --repeat takes 1 to 1000");
  if ((args.has("top-k") || args.has("top-p")) && !(args.get_double("temperature", 0.0) > 0))
    fail("qvl bench: --top-k and --top-p choose among sampled tokens: give --temperature above 0 with them");
  if (images < 1 || images > 64 || (images > 1 && image_size == 0))
    fail("qvl bench: --images takes 1 to 64, with --image-size");
  const int64_t follow_up_images = args.get_int("follow-up-images", 0);
  if (follow_up_images < 0 || follow_up_images > 64 || (follow_up_images > 0 && (image_size == 0 || follow_up_tokens == 0)))
    fail("qvl bench: --follow-up-images takes 0 to 64, with --image-size and --follow-up-tokens");
  std::vector<RgbImage> follow_up_pictures;  // after the first turn's (other seeds: other pictures)
  for (int64_t n = 0; n < follow_up_images; ++n) follow_up_pictures.push_back(synthetic_image(image_size, images + n));
  if (args.has("image") && image_size > 0) fail("qvl bench: --image and --image-size exclude each other");
  if ((args.has("views-layer") || args.has("views-snapshot")) && !args.has("views"))
    fail("qvl bench: --views-layer and --views-snapshot go with --views");
  // Bounded before the prompt's text or the images are made (10^6 once asked for a terabyte of pixels).
  if (const int64_t limit = ImageLimits{}.max_pixels; image_size > 0 && image_size > limit / image_size)
    fail("qvl bench: --image-size ", image_size, " is over the image limit of ", limit, " pixels");
  if (prompt_tokens > options.max_context || decode_tokens > options.max_context)
    fail("qvl bench: --prompt-tokens and --decode-tokens are at most the context limit of ", options.max_context,
         " (--max-context)");

  const int64_t vision_cache_mb = args.get_int("vision-cache-mb", 0);
  if (vision_cache_mb < 0 || vision_cache_mb > (int64_t(1) << 20)) fail("qvl bench: --vision-cache-mb takes 0 to 1048576");
  options.vision_cache_bytes = uint64_t(vision_cache_mb) << 20;  // the runs repeat one request: kept, its pictures
                                                                  // would be encoded once
  const bool keep_prompt = args.has("keep-prompt");
  if (keep_prompt && follow_up_tokens > 0) fail("qvl bench: --keep-prompt and --follow-up-tokens exclude each other");
  // The kept conversation's budget: its one cache whatever its length (on a GPU the memory plan's room still bounds it).
  if (keep_prompt) options.conversation_cache_bytes = std::numeric_limits<uint64_t>::max();
  options.cuda_graphs = !args.has("no-graphs");
  if (args.has("no-fusion") && args.has("compare-fusion")) fail("qvl bench: --no-fusion and --compare-fusion exclude each other");
  if (args.has("no-fusion")) options.fusions = Fusions::none();
  if (args.has("fusion-off")) options.fusions = fusions_without(args.get("fusion-off"), options.fusions);
  options.attention_window.blocks = args.get_int("attention-window", 0);
  options.device = args.get("device", "cpu");
  options.weights = args.get("weights", "bf16");
  const auto engine = Engine::load(dir, options);

  GenerateRequest request;
  ChatMessage user{"user", {}};
  for (int64_t n = 0; image_size > 0 && n < images; ++n) {
    request.images.push_back(synthetic_image(image_size, n));
    user.content.push_back(ContentItem::image());
  }
  if (args.has("image")) {
    request.images.push_back(ImageInput::file(args.get("image")));
    user.content.push_back(ContentItem::image());
  }
  if (args.has("prompt") && args.has("prompt-tokens")) fail("qvl bench: --prompt and --prompt-tokens exclude each other");
  request.messages.push_back(std::move(user));
  const int64_t around = template_tokens(*engine, request);
  if (!args.has("prompt") && prompt_tokens < around + 1)
    fail("qvl bench: need --prompt-tokens >= ", around + 1, " (the chat template's ", around, " and a word)");
  request.messages.back().content.push_back(
      ContentItem::make_text(args.has("prompt") ? args.get("prompt") : hello_text(prompt_tokens - around)));
  request.max_new_tokens = decode_tokens;
  request.ignore_eos = true;
  if (keep_prompt) request.conversation_id = "bench";
  request.sampling.temperature = args.get_double("temperature", 0.0);
  request.sampling.top_k = args.get_int("top-k", 0);
  request.sampling.top_p = args.get_double("top-p", 1.0);

  // The views first: a machine where Vulkan cannot draw says so before minutes of other runs.
  std::optional<nlohmann::json> views;
  if (args.has("views")) {
    ViewsBenchOptions view_options;
    view_options.repeat = repeat;
    view_options.layer = args.get_int("views-layer", 0);
    if (args.has("views-snapshot")) view_options.snapshot_dir = args.get("views-snapshot");
    views = time_views(*engine, request, view_options);
  }

  // The GPU's vital signs through the timed runs (every 100 ms): real clocks, heat and power beside the speed.
  std::string vitals_reason;
  const std::unique_ptr<GpuVitalsSource> vitals_source =
      engine->device_identity() ? open_gpu_vitals(engine->device_identity()->uuid, &vitals_reason) : nullptr;
  if (!engine->device_identity()) vitals_reason = "the model runs on the CPU";
  std::optional<GpuVitalsRecorder> vitals;  // from the first timed run (the warm-up pages the weights in)

  std::vector<double> vision, prefill, decode, ttft, sample, kept;
  int64_t vision_replays = 0;  // timed runs whose tower replayed a recording (the first sighting records none)
  GenerateResult last;
  for (int64_t r = 0; r <= repeat; ++r) {
    last = engine->generate(request);
    if (r == 0) {  // warm-up: page in the weights, fill caches
      if (vitals_source) vitals.emplace(*vitals_source, 100);
      continue;
    }
    const auto& t = last.timing;
    vision.push_back(t.vision_ms);
    prefill.push_back(t.prefill_ms);
    decode.push_back(t.decode_ms / double(std::max<int64_t>(1, t.decode_steps)));
    ttft.push_back(t.preprocess_ms + t.vision_ms + t.prefill_ms);
    sample.push_back(t.sample_ms / double(std::max<int64_t>(1, t.generated_tokens)));
    kept.push_back(double(t.cached_tokens));
    vision_replays += t.vision_replayed;
  }
  // What the recording holds after the timed runs (before --compare-fusion's change of fusions forgets it).
  const uint64_t vision_recorded_bytes = engine->vision_cache().recorded_tower_bytes;
  if (keep_prompt && median(kept) < double(last.timing.prompt_tokens - 1))
    fail("qvl bench --keep-prompt: the timed runs kept ", median(kept), " of the prompt's ", last.timing.prompt_tokens,
         " tokens (the conversation was not kept; --max-context or the GPU's memory plan may be too small for it)");
  const nlohmann::json gpu_vitals = [&]() -> nlohmann::json {
    if (!vitals) return {{"unavailable", vitals_reason}};
    try {
      return GpuVitalsRecorder::report(vitals_source->device_name(), vitals->stop());
    } catch (const std::exception& e) {  // the driver refused a read: the speeds stand, without vitals
      return {{"unavailable", e.what()}};
    }
  }();
  const std::optional<nlohmann::json> follow_up =
      follow_up_tokens > 0 ? std::optional(time_follow_up(*engine, request, follow_up_tokens, follow_up_pictures, repeat))
                           : std::nullopt;
  // One more run with per-kernel timing, after the timed ones so the timing does not perturb them.
  auto profiler = std::make_shared<Profiler>();
  engine->set_profiler(profiler);
  engine->generate(request);
  engine->set_profiler(nullptr);
  const auto kernels = profiler->summary();
  if (args.has("trace")) write_file_atomically(args.get("trace"), profiler->chrome_trace());
  nlohmann::json kernel_table = nlohmann::json::array();
  for (const auto& k : kernels)
    kernel_table.push_back({{"name", k.name}, {"calls", k.calls}, {"total_ms", k.total_ms}, {"mean_us", k.mean_us},
                            {"p50_us", k.p50_us}, {"p95_us", k.p95_us}, {"gb_per_s", k.gb_per_s},
                            {"tflop_per_s", k.tflop_per_s}, {"share", k.share}});

  const std::optional<FusionComparison> comparison =
      args.has("compare-fusion") ? std::optional(compare_fusions(*engine, request, nullptr, true)) : std::nullopt;

  int64_t image_tokens = 0;  // after the 2x2 merge
  for (const auto& g : last.image_grids) image_tokens += g.t * g.h * g.w / 4;
  const MemoryReport memory = engine->memory_report();
  const uint64_t bytes_per_token = engine->decode_weight_bytes(&request);
  const double bandwidth = engine->measure_read_bandwidth();
  const double decode_ms = median(decode), roofline_ms = bandwidth > 0 ? double(bytes_per_token) / bandwidth * 1e3 : 0;
  nlohmann::json out = {
      {"model", dir.string()},
      {"fusions", engine->fusions().enabled()},
      {"backend", engine->backend_name()},
      {"weights", engine->weights()},
      {"kv_cache", engine->kv_cache()},
      {"device", engine->device()},
      {"cuda_graphs", backend_info(engine->backend_kind()).records_work && options.cuda_graphs},
      {"prompt_tokens", last.timing.prompt_tokens},
      {"images", int64_t(request.images.size())},
      {"image_tokens", image_tokens},
      {"decode_tokens", last.timing.generated_tokens},
      {"repeats", repeat},
      {"vision_ms", median(vision)},
      {"vision_replayed_runs", vision_replays},  // of the timed runs (RecordedVisionTower: a picture size seen before)
      {"vision_recorded_bytes", vision_recorded_bytes},
      {"cached_images", last.timing.cached_images},  // of the last run: kept features, not encoded (--vision-cache-mb)
      {"prompt_tokens_kept", median(kept)},  // --keep-prompt: what the timed runs did not prefill
      {"prefill_ms", median(prefill)},
      {"prefill_tokens_per_s", (double(last.timing.prompt_tokens) - median(kept)) / median(prefill) * 1e3},
      {"time_to_first_token_ms", median(ttft)},
      {"decode_ms_per_token", decode_ms},
      {"decode_tokens_per_s", 1e3 / decode_ms},
      {"sampling", {{"temperature", request.sampling.temperature}, {"top_k", request.sampling.top_k},
                    {"top_p", request.sampling.top_p}, {"ms_per_token", median(sample)}}},
      {"roofline", {{"weight_bytes_per_token", bytes_per_token},
                    {"measured_read_bandwidth_gb_per_s", bandwidth > 0 ? nlohmann::json(bandwidth / 1e9) : nlohmann::json()},
                    {"floor_ms_per_token", roofline_ms > 0 ? nlohmann::json(roofline_ms) : nlohmann::json()},
                    {"fraction_of_roofline", roofline_ms > 0 ? nlohmann::json(roofline_ms / decode_ms) : nlohmann::json()},
                    // What the same bytes would allow on the Pascal cards the project is for (their DRAM peaks).
                    {"gtx1080_floor_ms_per_token", double(bytes_per_token) / kGtx1080Bandwidth * 1e3},
                    {"mx330_floor_ms_per_token", double(bytes_per_token) / kMx330Bandwidth * 1e3}}},
      {"kernels", kernel_table},
      {"memory_plan", engine->memory_plan() ? memory_plan_json(*engine->memory_plan()) : nlohmann::json()},
      {"pool", memory.available ? nlohmann::json{{"allocated_peak_bytes", memory.allocated_peak},
                                                 {"reserved_peak_bytes", memory.reserved_peak},
                                                 {"by_owner", memory.by_owner}}
                                : nlohmann::json()},
  };
  if (comparison) out["fusion_comparison"] = comparison_json(*comparison);
  if (follow_up) out["follow_up"] = *follow_up;
  if (views) out["views"] = *views;
  out["gpu_vitals"] = gpu_vitals;
  if (args.has("json")) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (args.has("trace"))
    std::printf("chrome trace     %s (%zu kernel events of the profiled run)\n", args.get("trace").c_str(),
                profiler->events().size());
  std::printf("model            %s\nbackend          %s (weights %s, kv cache %s)\n", dir.c_str(),
              engine->backend_name().c_str(), engine->weights().c_str(), engine->kv_cache().c_str());
  if (const auto plan = engine->memory_plan()) std::printf("memory plan      %s\n", plan->summary().c_str());
  const std::string& backend = engine->backend_name();
  if (backend.find("profile sm61") != std::string::npos && backend.find("sm_6") == std::string::npos)
    std::printf("note             the SM61 profile forced on a newer GPU: these numbers check the Pascal code path, they\n"
                "                 say nothing about a real Pascal card's speed\n");
  std::printf("prompt           %lld tokens (%lld from %zu image(s))\n", (long long)out["prompt_tokens"].get<int64_t>(),
              (long long)image_tokens, request.images.size());
  std::printf("vision encode    %.1f ms", median(vision));
  if (last.timing.cached_images > 0)
    std::printf(" (%lld of %zu image(s) kept by content: their features uploaded, not encoded)",
                (long long)last.timing.cached_images, request.images.size());
  else if (request.images.size() > 1)
    std::printf(" (%.2f ms an image, %zu in one batch)", median(vision) / double(request.images.size()),
                request.images.size());
  if (vision_replays > 0)
    std::printf(" (the tower replayed as recorded in %lld of %lld runs)", (long long)vision_replays, (long long)repeat);
  std::printf("\nprefill          %.1f ms (%.1f tokens/s)", median(prefill), out["prefill_tokens_per_s"].get<double>());
  if (keep_prompt) std::printf(" of the last %.0f tokens: the rest kept (--keep-prompt)", double(last.timing.prompt_tokens) - median(kept));
  std::printf("\ntime to 1st tok  %.1f ms\n", median(ttft));
  std::printf("decode           %.2f ms/token (%.2f tokens/s), median of %lld runs%s\n", decode_ms, 1e3 / decode_ms,
              (long long)repeat, out["cuda_graphs"].get<bool>() ? ", steps replayed as a CUDA graph" : "");
  std::printf("sampling         %.3f ms/token of it (%s)\n", median(sample),
              request.sampling.temperature > 0 ? cat("temperature ", request.sampling.temperature, ", top-k ",
                                                     request.sampling.top_k, ", top-p ", request.sampling.top_p).c_str()
                                               : "greedy");
  if (follow_up) {
    const nlohmann::json& f = *follow_up;
    std::printf("second turn      %lld new tokens (%lld new pictures) after %lld kept: first token in %.2f ms (%.2f ms of "
                "it vision, %.2f ms prefill, %.2fx the prefill); computed whole %.2f ms\n",
                (long long)f["new_tokens"].get<int64_t>(), (long long)f["new_images"].get<int64_t>(),
                (long long)f["cached_tokens"].get<int64_t>(), f["time_to_first_token_ms"].get<double>(),
                f["vision_ms"].get<double>(), f["prefill_ms"].get<double>(),
                f["time_to_first_token_over_prefill"].get<double>(), f["whole_time_to_first_token_ms"].get<double>());
  }
  if (views) print_views(*views);
  print_vitals(gpu_vitals);
  if (memory.available) {
    std::printf("device pool      peak %.1f MiB allocated, %.1f MiB reserved; now:", double(memory.allocated_peak) / (1 << 20),
                double(memory.reserved_peak) / (1 << 20));
    for (const auto& [owner, bytes] : memory.by_owner) std::printf(" %s %.1f MiB", owner.c_str(), double(bytes) / (1 << 20));
    std::printf("\n");
  }
  std::printf("\nper kernel (one profiled run: prefill + %lld decode steps, each kernel launched and timed with events),"
              " by total time:\n", (long long)decode_tokens);
  std::printf("  %-34s %7s %10s %10s %10s %9s %9s %6s\n", "kernel", "calls", "total ms", "mean us", "p95 us", "GB/s", "TFLOP/s", "share");
  for (std::size_t i = 0; i < kernels.size() && i < 15; ++i) {
    const auto& k = kernels[i];
    std::printf("  %-34s %7lld %10.2f %10.1f %10.1f %9.1f %9.3f %5.1f%%\n", k.name.c_str(), (long long)k.calls, k.total_ms,
                k.mean_us, k.p95_us, k.gb_per_s, k.tflop_per_s, 100 * k.share);
  }
  std::printf("weights          %s: %.3f GB read per token; floors on a GTX 1080 (320 GB/s) %.2f ms, an MX330 "
              "(48 GB/s) %.2f ms\n", engine->weights().c_str(), double(bytes_per_token) / 1e9,
              double(bytes_per_token) / kGtx1080Bandwidth * 1e3, double(bytes_per_token) / kMx330Bandwidth * 1e3);
  if (bandwidth > 0)
    std::printf("roofline         %.3f GB of weights per token / %.1f GB/s measured = %.2f ms floor; achieved %.0f%%\n",
                double(bytes_per_token) / 1e9, bandwidth / 1e9, roofline_ms, 100 * out["roofline"]["fraction_of_roofline"].get<double>());
  else
    std::printf("roofline         %.3f GB of weights per token; device bandwidth is not measured for %s yet\n",
                double(bytes_per_token) / 1e9, engine->device().c_str());
  if (comparison) print_comparison(*comparison);
  return 0;
}

}  // namespace qvl::cli
