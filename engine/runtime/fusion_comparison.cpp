#include "runtime/fusion_comparison.h"

#include <cmath>

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

FusionRun run_one(Engine& engine, const GenerateRequest& request, const Fusions& fusions, std::vector<float>& logits,
                  std::vector<float>& decode_logits, const std::atomic<bool>* cancel) {
  engine.set_fusions(fusions);
  engine.set_profiler(nullptr);
  FusionRun run;
  GenerateResult plain = engine.generate(request, nullptr, cancel);
  run.timing = plain.timing;
  run.generated_ids = plain.generated_ids;
  logits = std::move(plain.first_step_logits);
  decode_logits = std::move(plain.last_step_logits);

  auto profiler = std::make_shared<Profiler>();
  engine.set_profiler(profiler);
  engine.generate(request, nullptr, cancel);
  engine.set_profiler(nullptr);
  run.kernels = profiler->summary();
  for (const auto& k : run.kernels) run.kernel_ms += k.total_ms;
  return run;
}

}  // namespace

FusionComparison compare_fusions(Engine& engine, GenerateRequest request, const std::atomic<bool>* cancel) {
  const EngineStateGuard guard{engine, engine.fusions(), engine.profiler()};
  const Fusions fused = guard.fusions == Fusions::none() ? Fusions{} : guard.fusions;
  request.sampling = {};  // greedy: both ways must answer the same if the fusions are right
  request.keep_step_logits = true;
  FusionComparison out;
  out.fusions = fused.enabled();
  std::vector<float> reference, candidate, decode_reference, decode_candidate;
  out.unfused = run_one(engine, request, Fusions::none(), reference, decode_reference, cancel);
  out.fused = run_one(engine, request, fused, candidate, decode_candidate, cancel);
  out.difference = compare_logits(reference, candidate);
  out.difference.same_tokens = out.unfused.generated_ids == out.fused.generated_ids;
  // The decode kernels' own difference, where both ran a decode step after the same tokens.
  if (out.difference.same_tokens && !decode_reference.empty() && decode_reference.size() == decode_candidate.size()) {
    out.decode_difference = compare_logits(decode_reference, decode_candidate);
    out.decode_difference->same_tokens = true;
  }
  return out;
}

}  // namespace qvl
