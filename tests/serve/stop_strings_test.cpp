// The OpenAI API's stop strings over streamed text: nothing from the first stop string on is shown, text that may
// begin one is held back only until it cannot, and every other byte is shown exactly once.
#include <gtest/gtest.h>

#include "serve/stop_strings.h"

namespace qvl::serve {
namespace {

// Streams `pieces` through the stop strings and returns what a client would see, and whether a stop string ended it.
std::pair<std::string, bool> stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopStrings s(stops);
  std::string shown;
  for (const auto& p : pieces) {
    shown += s.push(p);
    if (s.stopped()) break;
  }
  shown += s.finish();
  return {shown, s.stopped()};
}

TEST(StopStrings, EndBeforeTheFirstStopStringSplitAcrossPieces) {
  EXPECT_EQ(stream({"END"}, {"a red tri", "angle E", "N", "D and more"}), (std::pair<std::string, bool>{"a red triangle ", true}));
  // The earliest of several, whichever is listed first.
  EXPECT_EQ(stream({"circle", "red"}, {"a red circle"}), (std::pair<std::string, bool>{"a ", true}));
  // A held prefix that does not complete is shown after all.
  EXPECT_EQ(stream({"ENDING"}, {"the END", " is near"}), (std::pair<std::string, bool>{"the END is near", false}));
  EXPECT_EQ(stream({"\n\n"}, {"line\n", "\n", "next"}), (std::pair<std::string, bool>{"line", true}));
}

TEST(StopStrings, HoldBackOnlyWhatMayBeginAStopString) {
  StopStrings s({"<stop>"});
  EXPECT_EQ(s.push("abc<st"), "abc");
  EXPECT_EQ(s.push("x"), "<stx");
  EXPECT_EQ(s.push("<"), "");
  EXPECT_EQ(s.finish(), "<");
  StopStrings none({});
  EXPECT_EQ(none.push("anything"), "anything");
  EXPECT_EQ(none.finish(), "");
}

TEST(StopStrings, MultiByteCharactersStayWhole) {
  // "，" (U+FF0C, three bytes) as the stop: the text before it is shown, the character never in part.
  const auto [shown, stopped] = stream({"，"}, {"你好", "，世界"});
  EXPECT_EQ(shown, "你好");
  EXPECT_TRUE(stopped);
}

}  // namespace
}  // namespace qvl::serve
