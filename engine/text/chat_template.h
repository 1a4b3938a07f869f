#pragma once
// The Qwen3-VL Instruct chat format, rendered exactly as transformers renders the model's Jinja template:
//   [<|im_start|>system\n{system text}<|im_end|>\n]            only when the first message is a system message
//   <|im_start|>user\n{items in order}<|im_end|>\n             image -> <|vision_start|><|image_pad|><|vision_end|>
//   <|im_start|>assistant\n{text}<|im_end|>\n                  history
//   <|im_start|>assistant\n                                    the generation prompt
// There is no default system prompt; system messages after the first are dropped, as the template drops them.
#include <string>
#include <vector>

namespace qvl {

struct ContentItem {
  enum class Kind { Text, Image, Video };
  Kind kind = Kind::Text;
  std::string text;  // for Text
  static ContentItem make_text(std::string t) { return {Kind::Text, std::move(t)}; }
  static ContentItem image() { return {Kind::Image, {}}; }
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::vector<ContentItem> content;
  static ChatMessage text(std::string role, std::string text) { return {std::move(role), {ContentItem::make_text(std::move(text))}}; }
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool add_vision_id = false;  // "Picture 1: " before each image
};

// Throws qvl::Error for an unknown role or an image in a system message.
std::string render_chat(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options = {});

// Number of images in the rendered conversation (user and tool messages), in order.
std::size_t count_images(const std::vector<ChatMessage>& messages);

}  // namespace qvl
