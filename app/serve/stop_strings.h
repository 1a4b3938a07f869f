#pragma once
// The OpenAI API's `stop`: the answer ends where one of the strings first appears, and that string is not shown.
// Streamed text is held back only while its end could still begin one of them.
#include <string>
#include <string_view>
#include <vector>

namespace qvl::serve {

class StopStrings {
public:
  // `stops` must not hold an empty string (parse_chat_request refuses one: it would stop before the answer began).
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds generated text (whole UTF-8 characters); returns what may be shown now. Once a stop string has appeared
  // everything from it on is dropped and stopped() is true.
  std::string push(std::string_view text);
  bool stopped() const { return stopped_; }
  // The text still held back, when the answer ended without a stop string.
  std::string finish();

private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace qvl::serve
