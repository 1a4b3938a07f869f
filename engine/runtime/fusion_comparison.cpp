#include "runtime/fusion_comparison.h"

#include <algorithm>
#include <cmath>

#include "backend/registry.h"
#include "core/cancel.h"
#include "core/error.h"

namespace qvl {

OutputDifference compare_logits(const std::vector<float>& reference, const std::vector<float>& candidate) {
  if (reference.size() != candidate.size()) fail("compare_logits: ", reference.size(), " against ", candidate.size(), " values");
  OutputDifference d;
  double diff2 = 0, ref2 = 0, cand2 = 0, dot = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double r = reference[i], c = candidate[i];
    d.max_abs = std::max(d.max_abs, std::abs(r - c));
    diff2 += (r - c) * (r - c);
    ref2 += r * r;
    cand2 += c * c;
    dot += r * c;
  }
  d.relative_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  d.cosine = ref2 > 0 && cand2 > 0 ? dot / std::sqrt(ref2 * cand2) : (diff2 == 0 ? 1.0 : 0.0);
  return d;
}

namespace {

// Restores what compare_fusions changes, also when a run throws.
struct EngineStateGuard {
  Engine& engine;
  Fusions fusions;
  std::shared_ptr<Profiler> profiler;
  ~EngineStateGuard() {
    engine.set_fusions(fusions);
    engine.set_profiler(profiler);
  }
};

// A run's outputs: greedy tokens, the first step's and the last decode step's logits.
struct Outputs {
  std::vector<int32_t> ids;
  std::vector<float> first, last;
};

GenerateResult plain_run(Engine& engine, const GenerateRequest& request, const Fusions& fusions, Outputs& out,
                         const std::atomic<bool>* cancel) {
  engine.set_fusions(fusions);
  engine.set_profiler(nullptr);
  GenerateResult plain = engine.generate(request, nullptr, cancel);
  // A stopped run has no logits to compare (empty against empty once read as a perfect match): the comparison stops.
  if (plain.stop_reason == "cancelled") throw Cancelled();
  out.ids = plain.generated_ids;
  out.first = std::move(plain.first_step_logits);
  out.last = std::move(plain.last_step_logits);
  return plain;
}

// The profiled run of one way: its per-kernel table (the timings come from the plain runs).
void profile_one(Engine& engine, const GenerateRequest& request, const Fusions& fusions, FusionRun& run,
                 const std::atomic<bool>* cancel) {
  engine.set_fusions(fusions);
  auto profiler = std::make_shared<Profiler>();
  engine.set_profiler(profiler);
  const bool stopped = engine.generate(request, nullptr, cancel).stop_reason == "cancelled";
  engine.set_profiler(nullptr);
  if (stopped) throw Cancelled();
  run.kernels = profiler->summary();
  for (const auto& k : run.kernels) run.kernel_ms += k.total_ms;
}

// The run whose decode took the median time per token.
const GenerateResult& median_run(std::vector<GenerateResult>& runs) {
  auto per_token = [](const GenerateResult& r) { return r.timing.decode_ms / double(std::max<int64_t>(1, r.timing.decode_steps)); };
  std::sort(runs.begin(), runs.end(), [&](const GenerateResult& a, const GenerateResult& b) { return per_token(a) < per_token(b); });
  return runs[runs.size() / 2];
}

// The candidate's logits against the reference's: first step always; the last decode step where both ran one after
// the same tokens.
void compare_outputs(const Outputs& reference, const Outputs& candidate, OutputDifference& first,
                     std::optional<OutputDifference>& last) {
  first = compare_logits(reference.first, candidate.first);
  first.same_tokens = reference.ids == candidate.ids;
  last.reset();
  if (first.same_tokens && !reference.last.empty() && reference.last.size() == candidate.last.size()) {
    last = compare_logits(reference.last, candidate.last);
    last->same_tokens = true;
  }
}

}  // namespace

FusionComparison compare_fusions(Engine& engine, GenerateRequest request, const std::atomic<bool>* cancel,
                                 bool each_fusion, int timed_runs) {
  const EngineStateGuard guard{engine, engine.fusions(), engine.profiler()};
  const Fusions asked = guard.fusions == Fusions::none() ? Fusions{} : guard.fusions;
  const BackendInfo& device = backend_info(engine.backend_kind());
  FusionComparison out;
  Fusions fused = Fusions::none();
  for (const auto& [name, on] : Fusions::kSwitches) {
    // The head's bounded pick leaves the logits uncomputed; every step's logits are kept here, so it never runs.
    if (!(asked.*on) || on == &Fusions::bounded_head_pick) continue;
    if (device.fused_kernels.*on) fused.*on = true;
    else out.without_kernel.push_back(name);
  }
  out.fusions = fused.enabled();
  if (out.fusions.empty())
    fail("the ", device.label, " has no fused kernel for the fusions switched on: both ways would run the same code");
  request.sampling = {};  // greedy: both ways must answer the same if the fusions are right
  request.keep_step_logits = true;
  out.timed_runs = std::max(1, timed_runs);
  Outputs reference, candidate;
  std::vector<GenerateResult> unfused_runs, fused_runs;
  for (int r = 0; r < out.timed_runs; ++r) {  // interleaved: drift in the machine's speed falls on both ways alike
    unfused_runs.push_back(plain_run(engine, request, Fusions::none(), reference, cancel));
    fused_runs.push_back(plain_run(engine, request, fused, candidate, cancel));
  }
  for (auto [runs, run] : {std::pair{&unfused_runs, &out.unfused}, {&fused_runs, &out.fused}})
    run->timing = median_run(*runs).timing;  // the tokens and logits compared are the last run's (greedy: every run's)
  out.unfused.generated_ids = reference.ids;
  out.fused.generated_ids = candidate.ids;
  profile_one(engine, request, Fusions::none(), out.unfused, cancel);
  profile_one(engine, request, fused, out.fused, cancel);
  compare_outputs(reference, candidate, out.difference, out.decode_difference);
  for (const auto& [name, on] : Fusions::kSwitches) {
    if (!each_fusion || !(fused.*on)) continue;
    Fusions alone = Fusions::none();
    alone.*on = true;
    FusionEffect effect{name, {}, std::nullopt};
    plain_run(engine, request, alone, candidate, cancel);
    compare_outputs(reference, candidate, effect.difference, effect.decode_difference);
    out.each.push_back(std::move(effect));
  }
  return out;
}

}  // namespace qvl
