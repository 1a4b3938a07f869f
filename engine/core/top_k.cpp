#include "core/top_k.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

#include "core/error.h"

namespace qvl {

float kth_largest(std::span<const float> values, std::size_t k, std::vector<float>& heap) {
  // One pass with the k largest so far in a min-heap: a value at or below its top (the k-th largest so far) costs one
  // comparison, and after the first few thousand of 151,936 logits nearly all are. With an nth_element over (logit,
  // id) pairs, sampling at top-k 20 (the models' default) took 1.31 ms a token on this project's 2-core machine, now
  // 0.30 (docs/performance.md).
  heap.assign(values.begin(), values.begin() + std::ptrdiff_t(k));
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  for (std::size_t i = k; i < values.size(); ++i)
    if (values[i] > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.back() = values[i];
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  return heap.front();
}

double next_uniform(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return double((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

int32_t draw_from_candidates(std::span<const TopKCandidate> candidates, double top_p, uint64_t& state) {
  const std::size_t n = candidates.size();
  if (n == 0) return 0;  // every logit -inf: nothing is more likely than the first id
  if (n > kMaxSmallDraw) fail("draw_from_candidates: ", n, " candidates, more than ", kMaxSmallDraw);
  float best = -std::numeric_limits<float>::infinity();
  for (const TopKCandidate& c : candidates) best = std::max(best, c.value);
  std::array<double, kMaxSmallDraw> p;
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) total += p[i] = likelihood(candidates[i].value, best);
  std::size_t kept_ranks = n;  // the candidates ranked below it are dropped
  std::array<std::size_t, kMaxSmallDraw> rank;
  if (top_p < 1.0) {
    // Each candidate's rank among them by likelihood (ties: the lower id first): n² comparisons, as the device's
    // threads make them side by side; then the masses added in rank order up to the one that reaches top_p.
    std::array<std::size_t, kMaxSmallDraw> by_rank;
    for (std::size_t i = 0; i < n; ++i) {
      rank[i] = 0;
      for (std::size_t j = 0; j < n; ++j)
        rank[i] += p[j] > p[i] || (p[j] == p[i] && candidates[j].id < candidates[i].id);
      by_rank[rank[i]] = i;
    }
    const double keep_mass = top_p * total;
    double before = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (before + p[by_rank[r]] >= keep_mass) {
        kept_ranks = r + 1;
        break;
      }
      before += p[by_rank[r]];
    }
    total = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (rank[i] < kept_ranks) total += p[i];
  }
  // The walk in id order: a tiny change of the logits moves the draw's boundaries a little, never reorders the walk.
  double point = next_uniform(state) * total;
  int32_t last = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (kept_ranks < n && rank[i] >= kept_ranks) continue;
    last = candidates[i].id;
    if ((point -= p[i]) < 0) return last;
  }
  return last;
}

}  // namespace qvl
