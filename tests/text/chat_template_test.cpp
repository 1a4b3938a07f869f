// The chat template and prompt building against transformers' apply_chat_template and Qwen3VLProcessor
// (tests/golden/tokenizer/chat.json): rendered text, ids, and the expanded ids with one pad per image token.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_support.h"
#include "text/messages_json.h"
#include "text/prompt.h"

namespace qvl {
namespace {

std::shared_ptr<const Tokenizer> qwen_tokenizer() {
  static const auto tok = Tokenizer::load(test::resource_dir() / "tokenizer" / "tokenizer.json");
  return tok;
}

TEST(ChatTemplate, MatchesTransformersOnEveryGoldenConversation) {
  const auto tok = qwen_tokenizer();
  const auto cases = nlohmann::json::parse(test::read_bytes(std::string(QVL_TEST_GOLDEN_DIR) + "/tokenizer/chat.json"))["cases"];
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>() + (c["add_vision_id"].get<bool>() ? " +vision_id" : "") +
                 (c["add_generation_prompt"].get<bool>() ? " +gen" : ""));
    const Conversation conv = conversation_from_json(c["messages"], "/images");
    ChatTemplateOptions options;
    options.add_vision_id = c["add_vision_id"];
    options.add_generation_prompt = c["add_generation_prompt"];
    const std::string text = render_chat(conv.messages, options);
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(tok->encode(text), c["ids"].get<std::vector<TokenId>>());

    std::vector<int64_t> tokens_per_image;
    for (const auto& thw : c["image_grid_thw"]) tokens_per_image.push_back(thw[0].get<int64_t>() * thw[1].get<int64_t>() * thw[2].get<int64_t>() / 4);
    EXPECT_EQ(conv.image_paths.size(), tokens_per_image.size());
    EXPECT_EQ(count_images(conv.messages), tokens_per_image.size());
    EXPECT_EQ(build_prompt(*tok, conv.messages, tokens_per_image, 151655, options),
              c["expanded_ids"].get<std::vector<TokenId>>());
  }
}

TEST(ChatTemplate, ResolvesImagePathsAgainstTheMessagesFile) {
  const auto j = nlohmann::json::parse(R"([{"role": "user", "content": [
      {"type": "image", "image": "a.png"}, {"type": "image", "image": "/abs/b.jpg"},
      {"type": "image_url", "image_url": {"url": "file:///c.png"}}, {"type": "text", "text": "hi"}]}])");
  const Conversation conv = conversation_from_json(j, "/data/chat");
  ASSERT_EQ(conv.image_paths.size(), 3u);
  EXPECT_EQ(conv.image_paths[0], "/data/chat/a.png");
  EXPECT_EQ(conv.image_paths[1], "/abs/b.jpg");
  EXPECT_EQ(conv.image_paths[2], "/c.png");
}

TEST(ChatTemplate, TakesARequestBodyWithItsMessages) {  // as the OpenAI API's: {"messages": [...], ...}
  const auto j = nlohmann::json::parse(R"({"model": "x", "messages": [{"role": "user", "content": "hi"}]})");
  const Conversation conv = conversation_from_json(j, ".");
  ASSERT_EQ(conv.messages.size(), 1u);
  EXPECT_EQ(conv.messages[0].role, "user");
}

TEST(ChatTemplate, RejectsMalformedConversations) {
  EXPECT_THROW(conversation_from_json(nlohmann::json::parse(R"({"role": "user"})"), "."), Error);
  EXPECT_THROW(conversation_from_json(nlohmann::json::parse("[]"), "."), Error);  // nothing to answer
  EXPECT_THROW(conversation_from_json(nlohmann::json::parse(R"({"messages": []})"), "."), Error);
  // A request body's other settings are refused, not left unread; a data: URL is not a file path.
  EXPECT_THROW(conversation_from_json(nlohmann::json::parse(
                   R"({"temperature": 0.5, "messages": [{"role": "user", "content": "hi"}]})"), "."), Error);
  EXPECT_THROW(conversation_from_json(nlohmann::json::parse(R"([{"role": "user", "content": [
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])"), "."), Error);
  EXPECT_THROW(conversation_from_json(nlohmann::json::parse(R"([{"content": "x"}])"), "."), Error);
  EXPECT_THROW(conversation_from_json(nlohmann::json::parse(R"([{"role": "user", "content": 3}])"), "."), Error);
  EXPECT_THROW(conversation_from_json(nlohmann::json::parse(R"([{"role": "user", "content": [{"type": "image"}]}])"), "."), Error);
  EXPECT_THROW(render_chat({ChatMessage::text("narrator", "x")}), Error);
  EXPECT_THROW(render_chat({{"system", {ContentItem::image()}}}), Error);
}

TEST(ChatTemplate, ExpansionNeedsOnePadPerImage) {
  const std::vector<TokenId> ids{1, 151655, 2, 151655, 3};
  EXPECT_EQ(expand_image_pads(ids, 151655, {2, 1}), (std::vector<TokenId>{1, 151655, 151655, 2, 151655, 3}));
  EXPECT_THROW(expand_image_pads(ids, 151655, {2}), Error);
  EXPECT_THROW(expand_image_pads(ids, 151655, {2, 1, 1}), Error);
}

}  // namespace
}  // namespace qvl
