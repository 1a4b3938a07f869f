#include "text/messages_json.h"

#include "core/error.h"

namespace qvl {

Conversation conversation_from_json(const nlohmann::json& request, const std::filesystem::path& base_dir,
                                    const std::string& source) {
  // A bare list, or a request body as the OpenAI API's, {"messages": [...], "model": ...}: a field that would set
  // something else (temperature, max_tokens) is refused by name rather than left unread.
  const bool wrapped = request.is_object() && request.contains("messages");
  if (wrapped)
    for (const auto& [key, value] : request.items())
      if (key != "messages" && key != "model")
        fail(source, ": '", key, "' is not read from the file (only 'messages' and 'model' are); give it as an option");
  const nlohmann::json& j = wrapped ? request["messages"] : request;
  if (!j.is_array()) fail(source, ": expected a list of messages, or an object with one in 'messages'");
  if (j.empty()) fail(source, ": the list of messages is empty (it must hold at least one message)");
  Conversation conv;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    const std::string where = source + ": message " + std::to_string(i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) fail(where, ": needs a string 'role'");
    ChatMessage msg{m["role"].get<std::string>(), {}};
    const auto content = m.value("content", nlohmann::json(""));
    if (content.is_string()) {
      msg.content.push_back(ContentItem::make_text(content.get<std::string>()));
    } else if (content.is_array()) {
      for (const auto& item : content) {
        if (!item.is_object()) fail(where, ": content items must be objects");
        const std::string type = item.value("type", "");
        // Same tests as the template: an image is type "image" or has an "image"/"image_url" key.
        if (type == "image" || item.contains("image") || item.contains("image_url")) {
          const auto& ref = item.contains("image") ? item["image"] : item.value("image_url", nlohmann::json());
          const auto& path = ref.is_object() ? ref.value("url", nlohmann::json()) : ref;
          if (!path.is_string()) fail(where, ": image item needs a file path in 'image'");
          std::filesystem::path p = path.get<std::string>();
          if (p.string().rfind("data:", 0) == 0) fail(where, ": a data: URL is not read here; give the picture's file path");
          if (p.string().rfind("file://", 0) == 0) p = p.string().substr(7);
          if (p.is_relative()) p = base_dir / p;
          msg.content.push_back(ContentItem::image());
          if (msg.role == "user" || msg.role == "tool") conv.image_paths.push_back(p);
        } else if (type == "video" || item.contains("video")) {
          fail(where, ": video input is not supported");
        } else if (item.contains("text")) {
          if (!item["text"].is_string()) fail(where, ": 'text' must be a string");
          msg.content.push_back(ContentItem::make_text(item["text"].get<std::string>()));
        }
      }
    } else {
      fail(where, ": 'content' must be a string or a list");
    }
    conv.messages.push_back(std::move(msg));
  }
  return conv;
}

}  // namespace qvl
