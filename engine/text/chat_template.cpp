#include "text/chat_template.h"

#include "core/error.h"

namespace qvl {
namespace {

struct Counters {
  int images = 0, videos = 0;
};

void render_items(const std::vector<ContentItem>& items, const ChatTemplateOptions& options, Counters& count, std::string& out) {
  for (const auto& item : items) {
    switch (item.kind) {
      case ContentItem::Kind::Image:
        ++count.images;
        if (options.add_vision_id) out += "Picture " + std::to_string(count.images) + ": ";
        out += "<|vision_start|><|image_pad|><|vision_end|>";
        break;
      case ContentItem::Kind::Video:
        ++count.videos;
        if (options.add_vision_id) out += "Video " + std::to_string(count.videos) + ": ";
        out += "<|vision_start|><|video_pad|><|vision_end|>";
        break;
      case ContentItem::Kind::Text: out += item.text; break;
    }
  }
}

// System and assistant turns keep only their text items.
void render_text_items(const std::vector<ContentItem>& items, std::string& out) {
  for (const auto& item : items)
    if (item.kind == ContentItem::Kind::Text) out += item.text;
}

}  // namespace

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      fail("message ", i, ": unknown role '", role, "' (expected system, user, assistant or tool)");
    if (role == "system")
      for (const auto& item : messages[i].content)
        if (item.kind != ContentItem::Kind::Text) fail("message ", i, ": a system message cannot contain images or videos");
  }
  std::string out;
  if (!messages.empty() && messages[0].role == "system") {
    out += "<|im_start|>system\n";
    render_text_items(messages[0].content, out);
    out += "<|im_end|>\n";
  }
  Counters count;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      out += "<|im_start|>user\n";
      render_items(m.content, options, count, out);
      out += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      out += "<|im_start|>assistant\n";
      render_text_items(m.content, out);
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      render_items(m.content, options, count, out);
      out += "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::size_t count_images(const std::vector<ChatMessage>& messages) {
  std::size_t n = 0;
  for (const auto& m : messages)
    if (m.role == "user" || m.role == "tool")
      for (const auto& item : m.content) n += item.kind == ContentItem::Kind::Image;
  return n;
}

}  // namespace qvl
