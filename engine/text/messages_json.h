#pragma once
// Conversations in the JSON form transformers' apply_chat_template takes and `qvl generate --messages` reads:
//   [{"role": "user", "content": "text" | [{"type": "image", "image": "cat.png"}, {"type": "text", "text": "..."}]}]
// or a request body holding that list in "messages" (the OpenAI API's; other fields than "model" are refused). Image
// items carry a file path (not a data: URL); relative paths are resolved against `base_dir`.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/chat_template.h"

namespace qvl {

struct Conversation {
  std::vector<ChatMessage> messages;
  std::vector<std::filesystem::path> image_paths;  // in the order the images appear in the rendered prompt
};

// Throws qvl::Error naming `source` and the message index for anything malformed, and for an empty list.
Conversation conversation_from_json(const nlohmann::json& request, const std::filesystem::path& base_dir,
                                    const std::string& source = "messages");

}  // namespace qvl
