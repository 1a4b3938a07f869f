#include "core/first_max.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace qvl {

// Sixteen lanes (four vectors of GCC's vector extension, which every target lowers to its own SIMD or to scalars),
// each keeping its maximum and the first 16-value block that reached it: one running index was a chain of dependent
// loads and compares, ~3 cycles a logit, 0.17 ms of a 1.6 ms decode step of the 2B model on the H200's host. Within a
// lane a later equal value never replaces the kept one, and across lanes the smallest index among those holding the
// maximum wins: the first index.
FirstMax first_max(std::span<const float> v) {
  using F4 = float __attribute__((vector_size(16)));
  using I4 = int32_t __attribute__((vector_size(16)));
  constexpr int kVectors = 4, kLanes = 4 * kVectors;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  F4 best[kVectors];
  I4 block[kVectors], nan = {0, 0, 0, 0};
  for (int j = 0; j < kVectors; ++j) best[j] = F4{kNegInf, kNegInf, kNegInf, kNegInf}, block[j] = I4{0, 0, 0, 0};
  const auto blocks = int32_t(v.size() / kLanes);  // a vocabulary is far below 2^31 values
  for (int32_t b = 0; b < blocks; ++b)
    for (int j = 0; j < kVectors; ++j) {
      F4 x;
      std::memcpy(&x, v.data() + std::size_t(b) * kLanes + 4 * j, sizeof x);
      const I4 better = x > best[j];
      best[j] = better ? x : best[j];
      block[j] = better ? I4{b, b, b, b} : block[j];
      nan |= x != x;
    }
  FirstMax r;
  float top = kNegInf;  // lanes that saw only -inf take no part: all -inf gives index 0
  for (int j = 0; j < kVectors; ++j)
    for (int e = 0; e < 4; ++e) {
      r.nan |= nan[e] != 0;
      const std::size_t at = std::size_t(block[j][e]) * kLanes + std::size_t(4 * j + e);
      if (best[j][e] > top || (best[j][e] == top && top != kNegInf && at < r.index)) top = best[j][e], r.index = at;
    }
  for (std::size_t i = std::size_t(blocks) * kLanes; i < v.size(); ++i) {  // the tail: after every lane's indices
    r.nan |= std::isnan(v[i]);
    if (v[i] > top) top = v[i], r.index = i;
  }
  return r;
}

}  // namespace qvl
