#pragma once
// An error qvl serve answers with, in the OpenAI API's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "messages[0].role", "code": null}}
// `param` names the request field at fault (empty: none), `code` a machine-readable reason (empty: none).
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace qvl::serve {

class ApiError : public std::runtime_error {
public:
  ApiError(int http_status, std::string error_type, const std::string& message, std::string field = {},
           std::string reason = {})
      : std::runtime_error(message), status(http_status), type(std::move(error_type)), param(std::move(field)),
        code(std::move(reason)) {}

  // A 400 naming the field at fault: "<param>: <message>" (the message alone when there is no field).
  static ApiError invalid(const std::string& param, const std::string& message, std::string code = {}) {
    return {400, "invalid_request_error", param.empty() ? message : param + ": " + message, param, std::move(code)};
  }

  nlohmann::json body() const {
    const auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
    return {{"error", {{"message", what()}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}}}};
  }

  int status;
  std::string type, param, code;
};

}  // namespace qvl::serve
