#pragma once
// The options that size a request and place a model on the GPU (the context limit, the GPU's memory budget, the
// context the plan keeps room for, the architecture profile, the KV cache's type on either device), shared by every
// command that loads a model, and the memory plan as JSON.
#include <nlohmann/json.hpp>
#include <vector>

#include "qvl/args.h"
#include "runtime/engine.h"

namespace qvl::cli {

std::vector<OptionSpec> gpu_option_specs();
// Throws qvl::Error naming the option for a limit, budget or context out of range.
void apply_gpu_options(const Args& args, EngineOptions& options);
nlohmann::json memory_plan_json(const MemoryPlan& plan);

}  // namespace qvl::cli
