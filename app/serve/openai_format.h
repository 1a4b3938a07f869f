#pragma once
// The OpenAI API's response objects, as qvl serve writes them: a whole chat.completion, the chat.completion.chunk
// events of a stream (server-sent events), usage with the tokens a kept conversation served, and the model list.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/engine.h"

namespace qvl::serve {

struct ResponseHeader {
  std::string id;        // "chatcmpl-..." shared by every chunk of one answer
  int64_t created = 0;   // Unix time, seconds
  std::string model;
  std::string system_fingerprint;  // qvl's version, device and weights: what produced the numbers
};

// prompt_tokens, completion_tokens (every generated token, the end-of-turn token included), total_tokens and
// prompt_tokens_details.cached_tokens (prompt tokens a kept conversation already held).
nlohmann::json usage_json(const GenerateResult& result);

// "stop" (the end of the answer or a stop string), "length" (max_tokens reached).
std::string finish_reason(const GenerateResult& result, bool stop_string_seen);

nlohmann::json completion_json(const ResponseHeader& header, const std::string& content, const std::string& finish_reason,
                               const GenerateResult& result);
// One event of a stream: `delta` ({"role": "assistant"} first, then {"content": ...}, {} with the finish reason).
nlohmann::json chunk_json(const ResponseHeader& header, const nlohmann::json& delta, const nlohmann::json& finish_reason);
// The stream's last event when the request asked for usage: no choices, the token counts.
nlohmann::json usage_chunk_json(const ResponseHeader& header, const GenerateResult& result);
std::string server_sent_event(const nlohmann::json& data);
inline constexpr const char* kStreamEnd = "data: [DONE]\n\n";

nlohmann::json models_json(const std::string& model, int64_t created);

}  // namespace qvl::serve
