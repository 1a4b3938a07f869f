#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/first_max.h"

namespace qvl {

Sampler::Sampler(const SamplingOptions& options, std::size_t vocabulary)
    : options_(options), vocabulary_(vocabulary), state_(options.seed * 0x9e3779b97f4a7c15ull + 1) {
  // Written so that NaN fails each check (every comparison with NaN is false).
  if (!(options.temperature >= 0 && std::isfinite(options.temperature)))
    fail("temperature must be a finite number of 0 or more, not ", options.temperature);
  if (!(options.top_p > 0 && options.top_p <= 1)) fail("top_p must be in (0, 1], not ", options.top_p);
  if (options.top_k < 0) fail("top_k must not be negative, not ", options.top_k);
  if (!(options.repetition_penalty > 0 && std::isfinite(options.repetition_penalty)))
    fail("repetition_penalty must be a finite positive number, not ", options.repetition_penalty);
  if (!(options.presence_penalty >= -2 && options.presence_penalty <= 2))
    fail("presence_penalty must be from -2 to 2, not ", options.presence_penalty);
  if (!(options.frequency_penalty >= -2 && options.frequency_penalty <= 2))
    fail("frequency_penalty must be from -2 to 2, not ", options.frequency_penalty);
}

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

[[noreturn]] void fail_nan_logits() {
  fail("the model produced NaN logits: its weights hold NaN or Inf values, or its activations overflowed");
}
}  // namespace

bool Sampler::greedy_only() const {
  return options_.temperature == 0.0 && options_.repetition_penalty == 1.0 && options_.presence_penalty == 0.0 &&
         options_.frequency_penalty == 0.0;
}

int64_t Sampler::vocabulary(int64_t logits) const {
  return vocabulary_ > 0 ? std::min(logits, int64_t(vocabulary_)) : logits;
}

int32_t Sampler::take_pick(int64_t index, bool nan) const {
  if (nan) fail_nan_logits();
  return int32_t(index);
}

int32_t Sampler::next(std::span<float> all_logits, std::span<const int32_t> history, std::size_t answer_start) {
  // The ids that may be picked: all, or those the tokenizer knows (the rest stay as they are, unread).
  const std::span<float> logits(all_logits.data(), std::size_t(vocabulary(int64_t(all_logits.size()))));
  if (logits.empty()) fail("sampler: no logits to pick from");
  if (options_.presence_penalty != 0.0 || options_.frequency_penalty != 0.0) {
    // The answer's ids sorted: each distinct id once, with its count (the answer is short; the vocabulary is not).
    std::vector<int32_t> answer(history.begin() + std::ptrdiff_t(std::min(answer_start, history.size())), history.end());
    std::sort(answer.begin(), answer.end());
    for (std::size_t i = 0; i < answer.size();) {
      std::size_t j = i;
      while (j < answer.size() && answer[j] == answer[i]) ++j;
      if (answer[i] >= 0 && std::size_t(answer[i]) < logits.size())
        logits[std::size_t(answer[i])] -= float(options_.presence_penalty + options_.frequency_penalty * double(j - i));
      i = j;
    }
  }
  if (options_.repetition_penalty != 1.0) {
    const float p = float(options_.repetition_penalty);
    std::vector<bool> seen(logits.size(), false);
    for (int32_t id : history)
      if (id >= 0 && std::size_t(id) < logits.size() && !seen[std::size_t(id)]) {
        seen[std::size_t(id)] = true;
        float& l = logits[std::size_t(id)];
        l = l < 0 ? l * p : l / p;
      }
  }
  if (options_.temperature == 0.0) {  // the first of equal maxima; NaN checked in the same pass
    const FirstMax pick = first_max(logits);
    return take_pick(int64_t(pick.index), pick.nan);
  }
  // The candidates in id order, kept between tokens: top-k's few as they are, or (top-k off or large: 151,936 of
  // them) straight into the many-candidate draw's buffer, with no allocation a token.
  if (options_.top_k > 0 && std::size_t(options_.top_k) <= kMaxSmallDraw) {
    found_.clear();
    const bool numbers = temperature_top_k(logits, options_.temperature, options_.top_k, heap_,
                                           [&](float v, int32_t id) { found_.push_back({v, id}); });
    if (!numbers) fail_nan_logits();
    return draw(found_);  // (ties can keep more than kMaxSmallDraw)
  }
  return draw_many([&](const auto& add) {
    if (!temperature_top_k(logits, options_.temperature, options_.top_k, heap_, add)) fail_nan_logits();
  });
}

bool Sampler::top_k_only(int64_t max_top_k) const {
  return options_.temperature > 0.0 && options_.top_k > 0 && options_.top_k <= max_top_k &&
         options_.repetition_penalty == 1.0 && options_.presence_penalty == 0.0 && options_.frequency_penalty == 0.0;
}

int32_t Sampler::next_from_candidates(std::span<const TopKCandidate> candidates, bool nan) {
  if (nan) fail_nan_logits();
  return draw(candidates);
}

int32_t Sampler::draw(std::span<const TopKCandidate> found) {
  // A few candidates (top-k's): the draw a backend repeats where the logits are (core/top_k.h).
  if (found.size() <= kMaxSmallDraw) return draw_from_candidates(found, options_.top_p, state_);
  return draw_many([&](const auto& add) {
    for (const TopKCandidate& c : found) add(c.value, c.id);
  });
}

template <typename Each> int32_t Sampler::draw_many(Each each) {
  // Many (top-k off or over 128): the same rule, top-p's set found by selection instead of ranking every pair.
  candidates_.clear();
  float best = kNegInf;
  each([&](float value, int32_t id) {
    candidates_.push_back({double(value), id});
    best = std::max(best, value);
  });
  if (candidates_.empty()) return 0;  // every logit -inf: nothing is more likely than the first id
  double total = 0;
  for (Candidate& c : candidates_) total += c.p = likelihood(float(c.p), best);
  const auto more_likely = [](const Candidate& a, const Candidate& b) {  // ties: the lower id first
    return a.p > b.p || (a.p == b.p && a.id < b.id);
  };
  if (options_.top_p < 1.0) {
    // Keep the most likely tokens while the mass before them is under top_p (transformers drops a token when the mass
    // at or below it is at most 1 - top_p; the most likely always stays): the first R + 1 by likelihood, R the first
    // rank whose mass up to it reaches top_p. Found by selection, not sorting: split the range at its middle rank
    // (nth_element), keep the more likely half whole if its mass falls short, else look inside it; O(n) where a
    // sort of 151,936 ids took 24 tokens/s in qvl-studio with top-k off (#22), and a flat distribution keeps most.
    const double keep_mass = options_.top_p * total;
    selection_ = candidates_;  // the draw walks the kept ids in id order (below): selection scrambles this copy
    std::size_t lo = 0, hi = selection_.size();
    double before = 0;  // the mass of [0, lo): all more likely than anything in [lo, hi)
    while (hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      std::nth_element(selection_.begin() + std::ptrdiff_t(lo), selection_.begin() + std::ptrdiff_t(mid),
                       selection_.begin() + std::ptrdiff_t(hi), more_likely);
      double upper = 0;
      for (std::size_t i = lo; i < mid; ++i) upper += selection_[i].p;
      if (before + upper >= keep_mass) {
        hi = mid;  // the rank that reaches top_p is among the more likely half
      } else {
        before += upper;
        lo = mid;
      }
    }
    const Candidate last_kept = selection_[lo];  // the one that reaches top_p (or the least likely of all)
    std::erase_if(candidates_, [&](const Candidate& c) { return more_likely(last_kept, c); });
    total = 0;
    for (const Candidate& c : candidates_) total += c.p;
  }
  // The draw walks the candidates in id order: a tiny change of the logits (a kept conversation's prefill against a
  // whole one's, 1e-6) moves the draw's boundaries a little, never reorders the walk, so a seed gives the same answer.
  double point = next_uniform(state_) * total;
  for (const Candidate& c : candidates_)
    if ((point -= c.p) < 0) return c.id;
  return candidates_.back().id;
}

}  // namespace qvl
