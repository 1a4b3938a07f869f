#pragma once
// The body of POST /v1/chat/completions turned into an engine request, with every field checked: a wrong type, an
// unknown role, a feature qvl does not have (tools, logprobs, n > 1) or a limit passed is an ApiError naming the
// field ("messages[2].content[0].image_url.url") and, for limits, the limit. Unknown fields are ignored, as clients
// send extras (user, metadata, store).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "runtime/engine.h"
#include "serve/api_error.h"

namespace qvl::serve {

struct RequestLimits {
  int64_t max_images = 16;  // per request
  ImageLimits image;        // pixels (from the header, before decoding) and bytes per image
  // Images given as local paths or file:// URLs are read only from inside this folder (empty: refused).
  std::filesystem::path local_files_dir;
  int64_t default_max_tokens = 1024;  // when the request names none
  int64_t max_context = limits::kContextTokens;  // prompt + answer (the engine's): max_tokens is at most this
};

struct ChatRequest {
  GenerateRequest generate;  // messages, images, sampling, max_new_tokens, conversation_id
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the token counts
  std::vector<std::string> stop;
};

// `defaults` are the model's generation settings (temperature, top-k, top-p when the request names none). A request
// without a seed gets a random one. The conversation_id is derived from the conversation's opening (system prompt
// and first user turn), so that a follow-up or a regenerated answer finds the keys and values of the earlier request.
ChatRequest parse_chat_request(const nlohmann::json& body, const GenerationConfig& defaults, const RequestLimits& limits);

}  // namespace qvl::serve
