// POST /v1/chat/completions bodies as clients send them, turned into engine requests; and every field a client can
// get wrong refused with a 400 that names it.
#include <gtest/gtest.h>

#include "serve/chat_request.h"
#include "test_support.h"

namespace qvl::serve {
namespace {

using nlohmann::json;

const std::filesystem::path kImages = std::filesystem::path(QVL_TEST_GOLDEN_DIR) / "images" / "decode";

std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = uint32_t(uint8_t(bytes[i])) << 16 | (i + 1 < bytes.size() ? uint32_t(uint8_t(bytes[i + 1])) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(uint8_t(bytes[i + 2])) : 0);
    out += alphabet[n >> 18];
    out += alphabet[n >> 12 & 63];
    out += i + 1 < bytes.size() ? alphabet[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[n & 63] : '=';
  }
  return out;
}

std::string data_url(const std::filesystem::path& png) { return "data:image/png;base64," + base64(test::read_bytes(png)); }

json picture_question(const std::string& url, const std::string& question = "What shapes do you see?") {
  return {{"model", "anything"},
          {"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                    {{"role", "user"},
                                     {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", url}}}},
                                                              {{"type", "text"}, {"text", question}}})}}})}};
}

ChatRequest parse(const json& body, const RequestLimits& limits = {}) { return parse_chat_request(body, GenerationConfig{}, limits); }

// The error a body gets: its status, param and message.
ApiError refusal(const json& body, const RequestLimits& limits = {}) {
  try {
    parse(body, limits);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.dump().substr(0, 200);
  return {0, "", ""};
}

TEST(ChatRequest, TextAndPicturesBecomeTheEngineRequest) {
  json body = picture_question(data_url(kImages / "rgba.png"));
  body["max_tokens"] = 7;
  body["temperature"] = 0;
  body["seed"] = 42;
  body["stop"] = "END";
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["presence_penalty"] = 0.5;
  body["user"] = "someone";  // extras clients send are ignored
  const ChatRequest r = parse(body);
  ASSERT_EQ(r.generate.messages.size(), 2u);
  EXPECT_EQ(r.generate.messages[0].role, "system");
  ASSERT_EQ(r.generate.messages[1].content.size(), 2u);
  EXPECT_EQ(r.generate.messages[1].content[0].kind, ContentItem::Kind::Image);
  EXPECT_EQ(r.generate.messages[1].content[1].text, "What shapes do you see?");
  ASSERT_EQ(r.generate.images.size(), 1u);
  EXPECT_EQ(r.generate.images[0].size(), ImageInput::file(kImages / "rgba.png").size());
  EXPECT_EQ(r.generate.max_new_tokens, 7);
  EXPECT_EQ(r.generate.sampling.temperature, 0.0);
  EXPECT_EQ(r.generate.sampling.seed, 42u);
  EXPECT_EQ(r.generate.sampling.presence_penalty, 0.5);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  // max_completion_tokens, the newer name, wins; "developer" is the system prompt.
  body["max_completion_tokens"] = 9;
  body["messages"][0]["role"] = "developer";
  const ChatRequest newer = parse(body);
  EXPECT_EQ(newer.generate.max_new_tokens, 9);
  EXPECT_EQ(newer.generate.messages[0].role, "system");
}

TEST(ChatRequest, TheModelsDefaultsApplyAndAMissingSeedIsRandom) {
  GenerationConfig defaults;
  defaults.do_sample = true;
  defaults.temperature = 0.7;
  defaults.top_k = 20;
  const json body = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  RequestLimits limits;
  limits.default_max_tokens = 33;
  const ChatRequest a = parse_chat_request(body, defaults, limits), b = parse_chat_request(body, defaults, limits);
  EXPECT_EQ(a.generate.sampling.temperature, 0.7);
  EXPECT_EQ(a.generate.sampling.top_k, 20);
  EXPECT_EQ(a.generate.max_new_tokens, 33);
  EXPECT_NE(a.generate.sampling.seed, b.generate.sampling.seed);
}

TEST(ChatRequest, AFollowUpKeepsTheConversationsNameAnotherOpeningDoesNot) {
  const json first = picture_question(data_url(kImages / "rgba.png"));
  json follow_up = first;
  follow_up["messages"].push_back({{"role", "assistant"}, {"content", "A red triangle."}});
  follow_up["messages"].push_back({{"role", "user"}, {"content", "And its colour?"}});
  const std::string id = parse(first).generate.conversation_id;
  EXPECT_EQ(id.rfind("serve:", 0), 0u);
  EXPECT_EQ(parse(follow_up).generate.conversation_id, id);
  EXPECT_NE(parse(picture_question(data_url(kImages / "rgba.png"), "Other?")).generate.conversation_id, id);
  EXPECT_NE(parse(picture_question(data_url(kImages / "rgb.bmp").replace(11, 3, "bmp"))).generate.conversation_id, id);
}

TEST(ChatRequest, EveryWrongFieldIsNamed) {
  const json good = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  const auto with = [&](const std::string& key, const json& value) {
    json b = good;
    b[key] = value;
    return b;
  };
  const auto expect = [](const ApiError& e, int status, const std::string& param, const std::string& says) {
    EXPECT_EQ(e.status, status) << e.what();
    EXPECT_EQ(e.param, param) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  };
  expect(refusal(json::array()), 400, "", "must be a JSON object, not an array");
  expect(refusal(json::object()), 400, "messages", "is required");
  expect(refusal(with("messages", json::array())), 400, "messages", "at least one message");
  expect(refusal(with("messages", json::array({{{"role", "robot"}, {"content", "x"}}}))), 400, "messages[0].role",
         "unknown role 'robot'");
  expect(refusal(with("messages", json::array({{{"role", "tool"}, {"content", "x"}}}))), 400, "messages[0].role",
         "no tool calls");
  expect(refusal(with("messages", json::array({{{"role", "user"}, {"content", 5}}}))), 400, "messages[0].content",
         "a string or an array of parts, not a number");
  expect(refusal(with("messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "audio"}}})}}}))), 400,
         "messages[0].content[0].type", "\"audio\" is not supported");
  expect(refusal(with("max_tokens", "10")), 400, "max_tokens", "must be an integer, not a string");
  expect(refusal(with("max_tokens", 0)), 400, "max_tokens", "must be from 1");
  expect(refusal(with("temperature", 3)), 400, "temperature", "from 0 to 2, not 3");
  expect(refusal(with("top_p", 0)), 400, "top_p", "above 0");
  expect(refusal(with("presence_penalty", -3)), 400, "presence_penalty", "from -2 to 2");
  expect(refusal(with("n", 2)), 400, "n", "one answer a request");
  RequestLimits short_context;
  short_context.max_context = 100;
  expect(refusal(with("max_tokens", 101), short_context), 400, "max_tokens", "must be from 1 to 100, not 101");
  EXPECT_NO_THROW(parse(with("tool_choice", "auto")));
  expect(refusal(with("logprobs", true)), 400, "logprobs", "not supported");
  expect(refusal(with("tools", json::array({{{"type", "function"}}}))), 400, "tools", "not supported");
  expect(refusal(with("stop", json::array({"a", "b", "c", "d", "e"}))), 400, "stop", "at most 4");
  expect(refusal(with("stop", "")), 400, "stop", "empty string");
  expect(refusal(with("stop", json::array({1}))), 400, "stop[0]", "must be a string");
  expect(refusal(with("stream_options", {{"include_usage", true}})), 400, "stream_options", "only allowed with");
  expect(refusal(with("stream", "yes")), 400, "stream", "true or false");
}

TEST(ChatRequest, PicturesAreRefusedByTheirLimitsAndSourcesBeforeDecoding) {
  const std::string url = "messages[1].content[0].image_url.url";
  EXPECT_EQ(refusal(picture_question("https://example.com/cat.png")).code, "unsupported_image_url");
  const ApiError local = refusal(picture_question((kImages / "rgba.png").string()));
  EXPECT_EQ(local.param, url);
  EXPECT_NE(std::string(local.what()).find("--allow-local-files"), std::string::npos) << local.what();
  RequestLimits allowed;
  allowed.local_files_dir = kImages;
  EXPECT_EQ(parse(picture_question("file://" + (kImages / "rgba.png").string()), allowed).generate.images.size(), 1u);
  EXPECT_EQ(parse(picture_question("rgba.png"), allowed).generate.images.size(), 1u);
  const ApiError outside = refusal(picture_question((kImages / ".." / "photo_240x320.png").string()), allowed);
  EXPECT_EQ(outside.code, "local_file_outside") << outside.what();
  // A link inside the folder looks inside it: the message says a path may lead out (where to is not told).
  EXPECT_NE(std::string(outside.what()).find("is or leads (through a link or '..') outside the folder"),
            std::string::npos) << outside.what();
  EXPECT_EQ(refusal(picture_question("../photo_240x320.png"), allowed).code, "local_file_outside");
  // file:// URLs of this machine, percent-escapes decoded; another host's, or a NUL byte, refused.
  std::string escaped = "file://localhost" + (kImages / "rgba.png").string();
  escaped.replace(escaped.find("rgba"), 1, "%72");
  EXPECT_EQ(parse(picture_question(escaped), allowed).generate.images.size(), 1u);
  EXPECT_EQ(refusal(picture_question("file://elsewhere" + (kImages / "rgba.png").string()), allowed).code,
            "local_file_outside");
  EXPECT_EQ(refusal(picture_question((kImages / "rgba.png").string() + std::string(1, '\0') + "x"), allowed).param, url);

  RequestLimits small;
  small.image.max_pixels = 100;
  const ApiError big = refusal(picture_question(data_url(kImages / "rgba.png")), small);
  EXPECT_EQ(big.param, url);
  EXPECT_NE(std::string(big.what()).find("40x24 is 960 pixels, more than the limit of 100 pixels (refused before decoding)"), std::string::npos) << big.what();
  const ApiError broken = refusal(picture_question("data:image/png;base64,iVBORw0KGgo="));
  EXPECT_EQ(broken.param, url);
  EXPECT_NE(std::string(broken.what()).find(url + ": "), std::string::npos) << broken.what();

  RequestLimits one;
  one.max_images = 1;
  json two = picture_question(data_url(kImages / "rgba.png"));
  two["messages"][1]["content"].push_back(two["messages"][1]["content"][0]);
  const ApiError many = refusal(two, one);
  EXPECT_EQ(many.code, "too_many_images");
  EXPECT_NE(std::string(many.what()).find("more than 1 pictures in one request"), std::string::npos) << many.what();
  json in_system = picture_question(data_url(kImages / "rgba.png"));
  in_system["messages"][0]["content"] = in_system["messages"][1]["content"];
  EXPECT_EQ(refusal(in_system).param, "messages[0].content[0]");
}

}  // namespace
}  // namespace qvl::serve
