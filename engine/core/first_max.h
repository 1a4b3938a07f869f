#pragma once
// Greedy's pick over scores: the first index of the largest value (index 0 where every value is -inf), and whether
// any value is NaN. The sampler's temperature-0 pick and the backends' greedy_pick (Backend::greedy_pick's reference)
// both run this, so a pick made on the device is the one the host makes.
#include <cstddef>
#include <span>

namespace qvl {

struct FirstMax {
  std::size_t index = 0;
  bool nan = false;
};
FirstMax first_max(std::span<const float> values);

}  // namespace qvl
