#include "runtime/fusion_comparison.h"

#include <cmath>

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

FusionRun run_one(Engine& engine, const GenerateRequest& request, const Fusions& fusions, Outputs& out,
                  const std::atomic<bool>* cancel) {
  FusionRun run;
  const GenerateResult plain = plain_run(engine, request, fusions, out, cancel);
  run.timing = plain.timing;
  run.generated_ids = plain.generated_ids;

  auto profiler = std::make_shared<Profiler>();
  engine.set_profiler(profiler);
  const bool stopped = engine.generate(request, nullptr, cancel).stop_reason == "cancelled";
  engine.set_profiler(nullptr);
  if (stopped) throw Cancelled();
  run.kernels = profiler->summary();
  for (const auto& k : run.kernels) run.kernel_ms += k.total_ms;
  return run;
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
                                 bool each_fusion) {
  const EngineStateGuard guard{engine, engine.fusions(), engine.profiler()};
  const Fusions fused = guard.fusions == Fusions::none() ? Fusions{} : guard.fusions;
  request.sampling = {};  // greedy: both ways must answer the same if the fusions are right
  request.keep_step_logits = true;
  FusionComparison out;
  out.fusions = fused.enabled();
  Outputs reference, candidate;
  out.unfused = run_one(engine, request, Fusions::none(), reference, cancel);
  out.fused = run_one(engine, request, fused, candidate, cancel);
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
