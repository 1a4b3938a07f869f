#pragma once
// Sampling's temperature, then top-k, as transformers applies them: the candidates a draw is made from. The sampler
// (runtime/sampler.cpp) runs this on the host, and Backend::top_k_candidates runs it where the logits are (its
// reference; kernels/top_k_candidates.cu on a GPU), so candidates found on the device are the ones the host finds.
// The draw from a few candidates (draw_from_candidates) is likewise the sampler's and Backend::top_k_candidates'
// (TopKSpec's draw).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace qvl {

// A value that top-k kept (the logit over the temperature) and its token id.
struct TopKCandidate {
  float value;
  int32_t id;
  bool operator==(const TopKCandidate&) const = default;
};

// The k-th largest of `values` (0 < k <= size), counting equal values apart as std::nth_element does; `heap` is
// scratch, reused from call to call.
float kth_largest(std::span<const float> values, std::size_t k, std::vector<float>& heap);

// A logit over the temperature as the sampler has always computed it: a double division, rounded to float.
inline float over_temperature(float logit, double temperature) { return float(double(logit) / temperature); }

// Each logit becomes over_temperature(logit, temperature) (in place), then
// visit(value, id) is called in id order for each value at or above the top_k-th largest (ties with it too, as
// transformers keeps them; top_k 0, or at least the count: every value), -inf excepted. Returns false, visiting
// nothing, where a logit is NaN.
template <typename Visit>
bool temperature_top_k(std::span<float> logits, double temperature, int64_t top_k, std::vector<float>& heap,
                       Visit&& visit) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (float& l : logits) {
    if (std::isnan(l)) return false;
    l = over_temperature(l, temperature);
  }
  const float kth = top_k > 0 && std::size_t(top_k) < logits.size() ? kth_largest(logits, std::size_t(top_k), heap)
                                                                      : kNegInf;
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (logits[i] >= kth && logits[i] != kNegInf) visit(logits[i], int32_t(i));
  return true;
}

// The sampler's random numbers: splitmix64, advanced one step, as a double in [0, 1) (53 bits).
double next_uniform(uint64_t& state);

// A kept value's likelihood against the largest: exp(value - largest) in double, and 1 for the largest itself (so an
// +inf value is certain where exp(inf - inf) would be NaN, and the others are 0; the same as exp elsewhere).
inline double likelihood(float value, float largest) {
  return value == largest ? 1.0 : std::exp(double(value) - double(largest));
}

// Top-p, then a draw, over at most kMaxSmallDraw candidates in id order (the values core/top_k.h's selection kept):
// each value's likelihood; where top_p < 1, the most likely kept (ties: the lower id first) up to and including the
// first whose mass, added in that order, reaches top_p of the total (transformers' rule); then next_uniform(state)
// times the kept mass, walked off in id order. No candidate: id 0, the state as it was. This is the sampler's draw
// from top-k's candidates where there are at most 128, and the reference of TopKSpec's draw: a device repeats it step
// for step (kernels/draw_from_candidates.cuh), so only exp's last bit can differ.
constexpr std::size_t kMaxSmallDraw = 128;
int32_t draw_from_candidates(std::span<const TopKCandidate> candidates, double top_p, uint64_t& state);

}  // namespace qvl
