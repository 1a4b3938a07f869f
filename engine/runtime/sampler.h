#pragma once
// Picks the next token from fp32 logits, in transformers' order: repetition penalty, temperature, top-k, top-p,
// then a draw from the softmax. Temperature 0 is greedy: the first index of the largest logit. The OpenAI API's
// presence and frequency penalties come first, as there.
#include <cstdint>
#include <span>
#include <vector>

#include "core/top_k.h"

namespace qvl {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double repetition_penalty = 1.0;
  // OpenAI's penalties, -2 to 2: subtracted from the logit of each token the answer already holds (not the prompt's),
  // once (presence) and once per occurrence (frequency). 0: off.
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  uint64_t seed = 0;
};

class Sampler {
public:
  // Throws qvl::Error naming an option that is out of range or not a number. vocabulary > 0: ids at or past it (the
  // output layer's padding rows past the tokenizer's ids, which no text stands for) are never picked.
  explicit Sampler(const SamplingOptions& options, std::size_t vocabulary = 0);
  // `logits` is modified in place (penalties, filtering) up to the vocabulary. `history` holds prompt and generated
  // ids, the answer's from `answer_start` on. Throws qvl::Error when a logit is NaN (weights holding NaN or Inf, or an
  // overflow).
  int32_t next(std::span<float> logits, std::span<const int32_t> history, std::size_t answer_start = 0);
  // Greedy with no penalty: the pick depends on the logits alone, so a backend may make it where they are
  // (Backend::greedy_pick, over the first `vocabulary` of `logits` logits).
  bool greedy_only() const;
  int64_t vocabulary(int64_t logits) const;
  // The pick a backend made ({index, whether a logit was NaN}): the index, or the error next() gives for NaN logits.
  int32_t take_pick(int64_t index, bool nan) const;
  // Temperature and top-k with no penalty, top-k at most `max_top_k`: the candidates depend on the logits alone, so a
  // backend may find them where the logits are (Backend::top_k_candidates) and hand back a few values, not 151,936.
  bool top_k_only(int64_t max_top_k) const;
  int64_t top_k() const { return options_.top_k; }
  double temperature() const { return options_.temperature; }
  double top_p() const { return options_.top_p; }
  // next() from the candidates a backend found (in id order; `nan`: a logit was NaN): the same token for the same
  // logits and the same state.
  int32_t next_from_candidates(std::span<const TopKCandidate> candidates, bool nan);
  // The state of the draws' random numbers (core/top_k.h's next_uniform): a backend that draws where the logits are
  // (Backend::top_k_candidates with TopKSpec's draw) starts from it and makes the draws this sampler makes next.
  uint64_t draw_state() const { return state_; }

private:
  SamplingOptions options_;
  std::size_t vocabulary_;
  uint64_t state_;
  struct Candidate {
    double p;  // its value, then (draw_many) its likelihood (core/top_k.h): the probability, unnormalised
    int32_t id;
  };
  std::vector<TopKCandidate> found_;  // top-k's few candidates, in id order; reused from token to token
  std::vector<Candidate> candidates_;  // many candidates' values, then likelihoods, in id order
  std::vector<Candidate> selection_;   // top-p's working copy
  std::vector<float> heap_;            // top-k's k largest logits so far (a min-heap)
  int32_t draw(std::span<const TopKCandidate> found);  // top-p over the candidates (id order), then the draw
  // draw() over many candidates: `each` hands each one's value and id, in id order, to the function it is given.
  template <typename Each> int32_t draw_many(Each each);
};

}  // namespace qvl
