#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "core/error.h"
#include "core/paths.h"
#include "io/model_folder.h"
#include "model/weights.h"
#include "qvl/args.h"
#include "qvl/commands.h"
#include "qvl/gpu_options.h"
#include "runtime/engine.h"

namespace qvl::cli {

namespace {
std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}
// --plan: with --gpu-memory-mb, the plan for a card of that budget, made without loading the model (no GPU needed);
// without it, the plan the engine makes on this machine's GPU (the model loaded there).
struct PlanAnswer {
  MemoryPlan plan;
  std::string weights;  // as held: --weights auto resolved
};
PlanAnswer plan_for(const ModelFolder& m, const Args& args) {
  EngineOptions options;
  options.weights = args.get("weights", "bf16");
  apply_gpu_options(args, options);
  if (options.device_memory_limit > 0) {
    const MemoryPlanRequest request = memory_plan_request(m, options);
    const WeightPolicy policy = weights_for(m, options.weights, request);
    return {plan_memory(m.config, request), m.config.quantization ? m.config.quantization->name() : policy.name};
  }
  if (!backend_info(BackendKind::Cuda).available)
    fail("qvl info --plan: no usable GPU here (", backend_info(BackendKind::Cuda).reason,
         "); give --gpu-memory-mb N to plan for a card of N MiB");
  options.device = "cuda";
  const auto engine = Engine::load(m.dir, options);
  return {*engine->memory_plan(), engine->weights()};
}

}  // namespace

int run_info(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder (default: the embedded demo model)"},
      {"plan", "", "print the GPU memory plan: which parts live on the GPU and the CPU, bytes each"},
      {"weights", "FORMAT", "with --plan: the weights as held (bf16, " + WeightPolicy::quantised_names() + ", auto)"},
      {"json", "", "print one JSON object"},
      {"help", "", "show this help"},
  };
  const std::vector<OptionSpec> gpu_specs = gpu_option_specs();
  specs.insert(specs.end() - 1, gpu_specs.begin(), gpu_specs.end());
  const auto parsed = parse_or_help("info", "Checks a model folder and summarises it.", argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  const ModelFolder m = ModelFolder::open(args.get("model", default_model_dir().string()));
  const ModelConfig& c = m.config;
  std::map<std::string, uint64_t> bytes_by_dtype;
  for (const auto& [name, e] : m.checkpoint.entries())
    bytes_by_dtype[std::string(dtype_name(e.info->dtype))] += e.info->end - e.info->begin;
  const int64_t params = c.parameter_count();
  const std::optional<PlanAnswer> plan = args.has("plan") ? std::optional(plan_for(m, args)) : std::nullopt;

  if (args.has("json")) {
    nlohmann::json j = {{"model", m.dir.string()},
                        {"config", c.to_json()},
                        {"parameters", params},
                        {"checkpoint_bytes", m.checkpoint.total_bytes()},
                        {"bytes_by_dtype", bytes_by_dtype},
                        {"files", m.checkpoint.files().size()},
                        {"quantization", c.quantization ? nlohmann::json(c.quantization->name()) : nlohmann::json()},
                        {"notes", m.notes}};
    if (plan) {
      j["memory_plan"] = memory_plan_json(plan->plan);
      j["memory_plan"]["weights"] = plan->weights;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const auto& t = c.text;
  const auto& v = c.vision;
  std::printf("model:      %s\n", m.dir.string().c_str());
  std::printf("text:       %lld layers, hidden %lld, MLP %lld, heads %lld (kv %lld, head_dim %lld), vocab %lld\n",
              (long long)t.num_hidden_layers, (long long)t.hidden_size, (long long)t.intermediate_size,
              (long long)t.num_attention_heads, (long long)t.num_key_value_heads, (long long)t.head_dim,
              (long long)t.vocab_size);
  std::printf("rope:       theta %g, mrope sections [%s] %s\n", t.rope_theta, join(t.mrope_section).c_str(),
              t.mrope_interleaved ? "interleaved" : "chunked");
  std::printf("vision:     %lld blocks, hidden %lld, MLP %lld, heads %lld, patch %lld, merge %lld, deepstack [%s]\n",
              (long long)v.depth, (long long)v.hidden_size, (long long)v.intermediate_size, (long long)v.num_heads,
              (long long)v.patch_size, (long long)v.spatial_merge_size, join(v.deepstack_visual_indexes).c_str());
  std::printf("head:       %s\n", c.tie_word_embeddings ? "tied to the embedding" : "separate lm_head");
  std::printf("parameters: %lld (%.3f B)\n", (long long)params, double(params) / 1e9);
  std::printf("format:     %s\n", c.quantization ? (c.quantization->name() + ", written by qvl quantize (loads as it is)").c_str()
                                                 : "not quantised (--weights q8 or q4 quantise it at load)");
  std::printf("checkpoint: %llu bytes (%.2f GiB) in %zu file(s):", (unsigned long long)m.checkpoint.total_bytes(),
              double(m.checkpoint.total_bytes()) / (1 << 30), m.checkpoint.files().size());
  for (const auto& [dtype, bytes] : bytes_by_dtype) std::printf(" %s %llu", dtype.c_str(), (unsigned long long)bytes);
  std::printf("\n");
  for (const auto& note : m.notes) std::printf("note:       %s\n", note.c_str());
  if (plan)
    std::printf("plan:       %s\nweights:    %s, as the plan holds them\n%s", plan->plan.summary().c_str(),
                plan->weights.c_str(), plan->plan.table().c_str());
  return 0;
}

}  // namespace qvl::cli
