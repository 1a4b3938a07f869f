#include "qvl/gpu_options.h"

#include "core/error.h"
#include "core/limits.h"

namespace qvl::cli {

std::vector<OptionSpec> gpu_option_specs() {
  return {
      {"profile", "NAME", "CUDA architecture profile: auto (from the GPU; info --plan without one plans for native), "
                          "sm61 (the Pascal path, any GPU) or native"},
      {"gpu-memory-mb", "N",
       "the GPU's memory budget in MiB, e.g. 1848 for a 2 GB card less a 200 MiB reserve (default: what the driver has "
       "free, less 200 MiB); the memory plan places the model within it"},
      {"max-context", "N", "prompt + answer tokens a request may hold (default 32768, at most 1048576)"},
      {"plan-context", "N", "tokens of context the memory plan keeps room for on the GPU (default 2048)"},
      {"kv-cache", "TYPE", "the KV cache, on the GPU and the CPU: bf16 (half the bytes), f32, or auto (default: bf16 "
                           "for a 16-bit checkpoint, as transformers keeps a bf16 one's; f32 for an f32 one)"},
  };
}

void apply_gpu_options(const Args& args, EngineOptions& options) {
  options.cuda_profile = args.get("profile", "auto");
  options.kv_cache = args.get("kv-cache", "auto");
  if (options.kv_cache != "auto" && options.kv_cache != "bf16" && options.kv_cache != "f32")
    fail("--kv-cache takes auto, bf16 or f32, not \"", options.kv_cache, "\"");
  const int64_t mib = args.get_int("gpu-memory-mb", 0);
  if (mib < 0 || mib > (int64_t(1) << 24))  // 16 TiB: no GPU has more
    fail("--gpu-memory-mb takes 0 (the driver's free memory) to ", int64_t(1) << 24, " MiB, not ", mib);
  options.device_memory_limit = std::size_t(mib) << 20;
  options.max_context = args.get_int("max-context", limits::kContextTokens);
  if (options.max_context < 16 || options.max_context > (int64_t(1) << 20))
    fail("--max-context takes 16 to ", int64_t(1) << 20, " tokens (prompt + answer), not ", options.max_context);
  options.plan_context = args.get_int("plan-context", std::min(options.plan_context, options.max_context));
  if (options.plan_context < 1 || options.plan_context > options.max_context)
    fail("--plan-context takes 1 to ", options.max_context, " tokens (the context limit), not ", options.plan_context);
}

nlohmann::json memory_plan_json(const MemoryPlan& plan) {
  nlohmann::json parts = nlohmann::json::array();
  for (const PlannedPart& p : plan.parts)
    parts.push_back({{"part", p.name}, {"device", p.on_gpu ? "gpu" : "cpu"}, {"bytes", p.bytes}});
  return {{"summary", plan.summary()},       {"budget_bytes", plan.budget},
          {"gpu_peak_bytes", plan.gpu_peak}, {"vision_on_gpu", plan.vision_on_gpu},
          {"gpu_layers", plan.gpu_layers},   {"layers", plan.layers},
          {"head_on_gpu", plan.head_on_gpu}, {"context", plan.context},
          {"context_room", plan.context_room}, {"prefill_chunk", plan.prefill_chunk},
          {"parts", parts}};
}

}  // namespace qvl::cli
