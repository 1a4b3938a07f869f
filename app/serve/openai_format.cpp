#include "serve/openai_format.h"

namespace qvl::serve {

using nlohmann::json;

json usage_json(const GenerateResult& result) {
  const auto prompt = int64_t(result.prompt_ids.size()), completion = int64_t(result.generated_ids.size());
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", result.timing.cached_tokens}}}};
}

std::string finish_reason(const GenerateResult& result, bool stop_string_seen) {
  if (!stop_string_seen && result.stop_reason == "max_new_tokens") return "length";
  return "stop";
}

namespace {

json header_json(const ResponseHeader& header, const char* object) {
  return {{"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model},
          {"system_fingerprint", header.system_fingerprint}};
}

}  // namespace

json completion_json(const ResponseHeader& header, const std::string& content, const std::string& finish_reason,
                     const GenerateResult& result) {
  json out = header_json(header, "chat.completion");
  out["choices"] = json::array({{{"index", 0},
                                 {"message", {{"role", "assistant"}, {"content", content}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish_reason}}});
  out["usage"] = usage_json(result);
  return out;
}

json chunk_json(const ResponseHeader& header, const json& delta, const json& finish_reason) {
  json out = header_json(header, "chat.completion.chunk");
  out["choices"] = json::array({{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}});
  return out;
}

json usage_chunk_json(const ResponseHeader& header, const GenerateResult& result) {
  json out = header_json(header, "chat.completion.chunk");
  out["choices"] = json::array();
  out["usage"] = usage_json(result);
  return out;
}

std::string server_sent_event(const json& data) {
  // Invalid UTF-8 cannot reach here (the detokeniser emits whole characters), but a replacement beats a throw.
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json models_json(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "qvl"}}})}};
}

}  // namespace qvl::serve
