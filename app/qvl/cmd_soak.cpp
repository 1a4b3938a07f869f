// qvl soak: many turns of chat in one process, watching that nothing grows — the process's resident memory and
// the GPU pool's occupancy — the way a long session in the app or a server would run.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/paths.h"
#include "model/weights.h"
#include "qvl/args.h"
#include "qvl/commands.h"
#include "qvl/gpu_options.h"
#include "runtime/engine.h"

namespace qvl::cli {

namespace {

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * int64_t(::sysconf(_SC_PAGESIZE));
}

struct TurnSample {
  int64_t rss = 0, pool_allocated = 0, pool_reserved = 0, prompt_tokens = 0;
};

struct Window {
  int64_t rss_median = 0, rss_max = 0, pool_allocated_max = 0, pool_reserved_max = 0;
};

Window summarise(std::vector<TurnSample> turns) {
  Window w;
  std::vector<int64_t> rss;
  for (const auto& t : turns) {
    rss.push_back(t.rss);
    w.rss_max = std::max(w.rss_max, t.rss);
    w.pool_allocated_max = std::max(w.pool_allocated_max, t.pool_allocated);
    w.pool_reserved_max = std::max(w.pool_reserved_max, t.pool_reserved);
  }
  std::sort(rss.begin(), rss.end());
  w.rss_median = rss.empty() ? 0 : rss[rss.size() / 2];
  return w;
}

nlohmann::json window_json(const Window& w) {
  return {{"rss_median_bytes", w.rss_median}, {"rss_max_bytes", w.rss_max},
          {"pool_allocated_max_bytes", w.pool_allocated_max}, {"pool_reserved_max_bytes", w.pool_reserved_max}};
}

double mib(int64_t bytes) { return double(bytes) / (1 << 20); }

}  // namespace

int run_soak(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder (default: the embedded demo model)"},
      {"turns", "N", "turns of chat (default 1000)"},
      {"image", "PATH", "a picture attached to every fourth question (default: the bundled scene-1.png)"},
      {"max-new-tokens", "N", "answer length per turn (default 16)"},
      {"chat-tokens", "N", "a chat is started afresh once its prompt passes this many tokens (default 1024)"},
      {"device", "NAME", "auto (default), cpu or cuda"},
      {"weights", "FORMAT", "bf16 (as stored, the default), " + WeightPolicy::quantised_names() + " or auto"},
      {"growth-mb", "N", "resident memory the last 100 turns may hold beyond the first 100 (default 16 MiB)"},
      {"json", "", "print one JSON object with the windows' numbers"},
      {"help", "", "show this help"},
  };
  const std::vector<OptionSpec> gpu_specs = gpu_option_specs();
  specs.insert(specs.end() - 1, gpu_specs.begin(), gpu_specs.end());
  const auto parsed = parse_or_help("soak",
                                    "Runs many turns of chat in one process and checks that resident memory and the GPU "
                                    "pool stay flat (the first 100 turns against the last 100). Exits 1 if they grew.",
                                    argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  const int64_t turns = args.get_int("turns", 1000), max_new = args.get_int("max-new-tokens", 16),
                chat_tokens = args.get_int("chat-tokens", 1024), growth_mb = args.get_int("growth-mb", 16);
  if (turns < 2 || turns > 1'000'000) fail("qvl soak: --turns takes 2 to 1000000");
  if (max_new < 1 || chat_tokens < 1) fail("qvl soak: --max-new-tokens and --chat-tokens must be positive");
  if (growth_mb < 0 || growth_mb > 1'000'000) fail("qvl soak: --growth-mb takes 0 to 1000000 (MiB), not ", growth_mb);
  const int64_t growth = growth_mb << 20;

  EngineOptions options;
  options.device = args.get("device", "auto");
  options.weights = args.get("weights", "bf16");
  apply_gpu_options(args, options);
  const auto engine = Engine::load(args.get("model", default_model_dir().string()), options);
  const std::filesystem::path image = args.get("image", (resource_dir() / "samples" / "scene-1.png").string());
  const char* questions[] = {"What shapes do you see?", "What colour is the largest one?", "Describe the picture.",
                             "How many objects are there?", "Tell me more."};

  std::vector<TurnSample> samples;
  std::vector<ChatMessage> chat;
  std::vector<ImageInput> images;
  int64_t chats = 1, prompt_tokens = 0, cached_tokens = 0;
  for (int64_t turn = 0; turn < turns; ++turn) {
    ChatMessage user{"user", {}};
    if (turn % 4 == 0) {
      user.content.push_back(ContentItem::image());
      images.push_back(ImageInput::file(image));
    }
    user.content.push_back(ContentItem::make_text(questions[turn % 5]));
    chat.push_back(user);
    GenerateRequest request;
    request.messages = chat;
    request.images = images;
    request.max_new_tokens = max_new;
    request.conversation_id = "soak-" + std::to_string(chats);  // kept between turns, as the GUI keeps a chat's
    const GenerateResult r = engine->generate(request);
    prompt_tokens += r.timing.prompt_tokens;
    cached_tokens += r.timing.cached_tokens;
    chat.push_back(ChatMessage::text("assistant", r.text));
    const MemoryReport pool = engine->memory_report();
    samples.push_back({resident_bytes(), pool.allocated, pool.reserved, r.timing.prompt_tokens});
    if (r.timing.prompt_tokens + r.timing.generated_tokens > chat_tokens) {  // a new chat, as a user would start one
      engine->forget_conversation(request.conversation_id);  // kept, the chats would fill the budget: not a leak
      chat.clear();
      images.clear();
      ++chats;
    }
  }

  const std::size_t window = std::size_t(std::min<int64_t>(100, turns / 2));
  const Window first = summarise({samples.begin(), samples.begin() + std::ptrdiff_t(window)});
  const Window last = summarise({samples.end() - std::ptrdiff_t(window), samples.end()});
  const bool rss_flat = last.rss_max <= first.rss_max + growth;
  const bool pool_flat = last.pool_allocated_max <= first.pool_allocated_max && last.pool_reserved_max <= first.pool_reserved_max;
  if (args.has("json")) {
    const nlohmann::json out = {{"turns", turns}, {"chats", chats}, {"window", window}, {"device", engine->device()},
                                {"backend", engine->backend_name()}, {"first", window_json(first)},
                                {"last", window_json(last)}, {"rss_flat", rss_flat}, {"pool_flat", pool_flat},
                                {"prompt_tokens", prompt_tokens}, {"cached_tokens", cached_tokens}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%lld turns in %lld chats on %s; %lld prompt tokens, %lld of them kept from earlier turns\n",
                (long long)turns, (long long)chats, engine->backend_name().c_str(), (long long)prompt_tokens,
                (long long)cached_tokens);
    for (const auto& [name, w] : {std::pair<const char*, const Window&>{"first", first}, {"last", last}})
      std::printf("%-5s %zu turns: resident %.1f MiB median, %.1f MiB max; pool %.1f MiB allocated, %.1f MiB reserved\n",
                  name, window, mib(w.rss_median), mib(w.rss_max), mib(w.pool_allocated_max), mib(w.pool_reserved_max));
    std::printf("resident memory %s (%+.1f MiB, allowed %.0f); pool %s\n", rss_flat ? "flat" : "GREW",
                mib(last.rss_max - first.rss_max), mib(growth), pool_flat ? "flat" : "GREW");
  }
  return rss_flat && pool_flat ? 0 : 1;
}

}  // namespace qvl::cli
