#pragma once
// Picks the next token from fp32 logits, in transformers' order: repetition penalty, temperature, top-k, top-p,
// then a draw from the softmax. Temperature 0 is greedy: the first index of the largest logit.
#include <cstdint>
#include <span>
#include <vector>

namespace qvl {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double repetition_penalty = 1.0;
  uint64_t seed = 0;
};

class Sampler {
public:
  explicit Sampler(const SamplingOptions& options);
  // `logits` is modified in place (penalties, filtering). `history` holds prompt and generated ids.
  int32_t next(std::vector<float>& logits, std::span<const int32_t> history);

private:
  SamplingOptions options_;
  uint64_t state_;
  double uniform();
};

}  // namespace qvl
