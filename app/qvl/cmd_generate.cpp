#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/paths.h"
#include "io/json_fields.h"
#include "model/weights.h"
#include "qvl/args.h"
#include "qvl/commands.h"
#include "qvl/gpu_options.h"
#include "runtime/engine.h"
#include "text/messages_json.h"

namespace qvl::cli {

namespace {

class PrintingSink final : public TokenSink {
public:
  void on_token(int32_t, const std::string& text) override {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
};

}  // namespace

int run_generate(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder (default: the embedded demo model)"},
      {"image", "PATH", "an image, before the text in the user turn (repeatable)"},
      {"prompt", "TEXT", "the user's text"},
      {"system", "TEXT", "a system prompt"},
      {"messages", "FILE", "a JSON conversation (a list of messages, or an OpenAI request body) instead of --image/--prompt/--system"},
      {"max-new-tokens", "N", "answer length limit (default 256)"},
      {"temperature", "T", "0 = greedy (default: the model's generation_config)"},
      {"top-k", "N", "keep the N most likely tokens (0 = off)"},
      {"top-p", "P", "keep the smallest set with probability P"},
      {"repetition-penalty", "R", "penalise tokens already present (1 = off)"},
      {"seed", "N", "random seed for sampling (default 0)"},
      {"device", "NAME", "auto (default), cpu or cuda"},
      {"weights", "FORMAT", "hold the weights as stored (bf16, the default), quantised at load (" + WeightPolicy::quantised_names() +
                             "; -gN: groups of N), or auto (on a GPU: the most precise whose memory plan keeps the decoder there)"},
      {"image-min-tokens", "N", "lower bound of tokens per image"},
      {"image-max-tokens", "N", "upper bound of tokens per image"},
      {"no-fusion", "", "run the unfused reference ops instead of the fused kernels"},
      {"attention-window", "N",
       "long contexts: prefill attention sees N blocks of 64 positions up to its own and the first block (0 = all, "
       "the default; an approximation)"},
      {"json", "", "print one JSON object instead of streaming the answer"},
      {"help", "", "show this help"},
  };
  const std::vector<OptionSpec> gpu_specs = gpu_option_specs();
  specs.insert(specs.end() - 1, gpu_specs.begin(), gpu_specs.end());  // before --help
  const auto parsed = parse_or_help("generate", "Answers a prompt about images with a Qwen3-VL model.", argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  EngineOptions options;
  options.device = args.get("device", "auto");
  options.weights = args.get("weights", "bf16");
  options.image_min_tokens = args.get_int("image-min-tokens", 0);
  options.image_max_tokens = args.get_int("image-max-tokens", 0);
  apply_gpu_options(args, options);
  if (args.has("no-fusion")) options.fusions = Fusions::none();
  options.attention_window.blocks = args.get_int("attention-window", 0);
  const std::filesystem::path model_dir = args.get("model", default_model_dir().string());
  const auto engine = Engine::load(model_dir, options);

  GenerateRequest request;
  std::vector<std::filesystem::path> image_paths;
  if (args.has("messages")) {
    if (args.has("prompt") || args.has("image") || args.has("system"))
      fail("qvl generate: --messages replaces --prompt, --image and --system");
    const std::filesystem::path file = args.get("messages");
    const Conversation conv = conversation_from_json(read_json_file(file), file.parent_path(), file.string());
    request.messages = conv.messages;
    image_paths = conv.image_paths;
  } else {
    if (!args.has("prompt") && !args.has("image")) fail("qvl generate: give --prompt (and --image) or --messages");
    if (args.has("system")) request.messages.push_back(ChatMessage::text("system", args.get("system")));
    ChatMessage user{"user", {}};
    for (const auto& path : args.all("image")) {
      user.content.push_back(ContentItem::image());
      image_paths.emplace_back(path);
    }
    if (args.has("prompt")) user.content.push_back(ContentItem::make_text(args.get("prompt")));
    request.messages.push_back(std::move(user));
  }
  for (const auto& path : image_paths) request.images.push_back(ImageInput::file(path));  // decoded after the checks

  const GenerationConfig defaults = GenerationConfig::load_or_default(model_dir / "generation_config.json");
  request.max_new_tokens = args.get_int("max-new-tokens", defaults.max_new_tokens > 0 ? defaults.max_new_tokens : 256);
  // The default length is a ceiling, as an API request's without one: the answer gets what the context leaves. A
  // length asked for is checked as given.
  request.answer_fits_context = !args.has("max-new-tokens");
  request.sampling.temperature = args.get_double("temperature", defaults.do_sample ? defaults.temperature : 0.0);
  request.sampling.top_k = args.get_int("top-k", defaults.do_sample ? defaults.top_k : 0);
  request.sampling.top_p = args.get_double("top-p", defaults.do_sample ? defaults.top_p : 1.0);
  request.sampling.repetition_penalty = args.get_double("repetition-penalty", defaults.repetition_penalty);
  request.sampling.seed = uint64_t(args.get_int("seed", 0));

  PrintingSink printer;
  const GenerateResult r = engine->generate(request, args.has("json") ? nullptr : &printer);
  if (!args.has("json")) {
    std::printf("\n");
    std::fflush(stdout);  // the summary goes to stderr: keep it after the answer
    std::fprintf(stderr, "[%s, %lld prompt tokens, %lld generated, prefill %.1f ms, decode %.1f ms (%.2f tokens/s), stop: %s]\n",
                 engine->backend_name().c_str(), (long long)r.timing.prompt_tokens, (long long)r.timing.generated_tokens,
                 r.timing.prefill_ms, r.timing.decode_ms,
                 r.timing.decode_ms > 0 ? double(r.timing.generated_tokens) * 1000.0 / r.timing.decode_ms : 0.0,
                 r.stop_reason.c_str());
    return 0;
  }
  nlohmann::json grids = nlohmann::json::array(), top = nlohmann::json::array();
  for (const auto& g : r.image_grids) grids.push_back({g.t, g.h, g.w});
  for (const auto& [id, logit] : r.first_step_top) top.push_back({id, logit});
  const nlohmann::json out = {
      {"prompt_token_ids", r.prompt_ids},
      {"image_grid_thw", grids},
      {"generated_token_ids", r.generated_ids},
      {"text", r.text},
      {"first_step_top", top},
      {"stop_reason", r.stop_reason},
      {"device", engine->device()},
      {"weights", engine->weights()},
      {"fusions", engine->fusions().enabled()},
      {"backend", engine->backend_name()},
      {"memory_plan", engine->memory_plan() ? memory_plan_json(*engine->memory_plan()) : nlohmann::json()},
      {"fallback_reason", engine->fallback_reason().empty() ? nlohmann::json() : nlohmann::json(engine->fallback_reason())},
      {"timing", {{"preprocess_ms", r.timing.preprocess_ms}, {"vision_ms", r.timing.vision_ms},
                  {"prefill_ms", r.timing.prefill_ms}, {"decode_ms", r.timing.decode_ms}, {"sample_ms", r.timing.sample_ms},
                  {"prompt_tokens", r.timing.prompt_tokens}, {"generated_tokens", r.timing.generated_tokens}}},
  };
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace qvl::cli
