#pragma once
// Fused versus unfused: the same request run both ways (greedy, same token budget), with wall-clock phase times,
// the per-kernel tables, and how far the fused path's output is from the unfused reference.
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace qvl {

struct FusionRun {
  GenerateTiming timing;                // from a run without per-kernel timing (honest wall-clock numbers)
  std::vector<KernelSummary> kernels;   // from a second run with per-kernel timing on
  double kernel_ms = 0;                 // sum over the kernels
  std::vector<int32_t> generated_ids;
};

// First-step logits of the fused run against the unfused run's.
struct OutputDifference {
  double max_abs = 0, relative_l2 = 0, cosine = 1;
  bool same_tokens = true;  // the greedy answers are identical
};
OutputDifference compare_logits(const std::vector<float>& reference, const std::vector<float>& candidate);

// One fusion alone (every other switch off) against the unfused run.
struct FusionEffect {
  std::string name;
  OutputDifference difference;
  std::optional<OutputDifference> decode_difference;
};

struct FusionComparison {
  std::vector<std::string> fusions;  // the fusions the fused run used: switched on, and with a kernel on this device
  std::vector<std::string> without_kernel;  // switched on, but this device runs them as the reference either way
  int timed_runs = 1;                       // plain runs each way (interleaved); the timings are the median run's
  FusionRun unfused, fused;
  OutputDifference difference;                       // first step: the prefill's logits
  std::optional<OutputDifference> decode_difference;  // the last decode step's logits (decode-only fusions show here)
  std::vector<FusionEffect> each;                     // when asked: each of `fusions` alone
};

// Runs `request` timed_runs times each way, interleaved (the timings are each way's median decode run: one run on a
// CPU once read an unchanged kernel as 0.60x), then once each way profiled, and with each_fusion once more for each
// fusion alone; restores the engine's fusions and profiler. Only fusions the device has a kernel for are compared
// (BackendInfo::fused_kernels). The request is made greedy. Throws qvl::Error when none is left to compare.
FusionComparison compare_fusions(Engine& engine, GenerateRequest request, const std::atomic<bool>* cancel = nullptr,
                                 bool each_fusion = false, int timed_runs = 3);

}  // namespace qvl
