#include "serve/stop_strings.h"

#include <algorithm>

namespace qvl::serve {

std::string StopStrings::push(std::string_view text) {
  if (stopped_) return {};
  held_ += text;
  std::size_t first = std::string::npos;
  for (const auto& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string shown = held_.substr(0, first);
    held_.clear();
    return shown;
  }
  // Hold back the longest end of the text that is the beginning of a stop string (it may yet complete it).
  std::size_t hold = 0;
  for (const auto& stop : stops_)
    for (std::size_t k = std::min(stop.size() - 1, held_.size()); k > hold; --k)
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
  std::string shown = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return shown;
}

std::string StopStrings::finish() {
  std::string rest;
  rest.swap(held_);
  return stopped_ ? std::string() : rest;
}

}  // namespace qvl::serve
