#include "serve/chat_request.h"

#include <random>

#include "core/content_hash.h"
#include "core/error.h"
#include "io/mapped_file.h"
#include "serve/data_url.h"

namespace qvl::serve {

namespace {

using nlohmann::json;

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number with a fraction";
    default: return "a number";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const json& j) {
  throw ApiError::invalid(param, cat("must be ", expected, ", not ", type_name(j)));
}

// The field, or nullptr when it is absent or null (clients send null for "not set").
const json* field(const json& object, const char* name) {
  const auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number_field(const json& body, const char* name, double low, double high) {
  const json* j = field(body, name);
  if (!j) return std::nullopt;
  if (!j->is_number()) wrong_type(name, "a number", *j);
  const double v = j->get<double>();
  if (!(v >= low && v <= high)) throw ApiError::invalid(name, cat("must be from ", low, " to ", high, ", not ", v));
  return v;
}

std::optional<int64_t> integer_field(const json& body, const char* name, int64_t low, int64_t high) {
  const json* j = field(body, name);
  if (!j) return std::nullopt;
  if (!j->is_number_integer()) wrong_type(name, "an integer", *j);
  if (j->is_number_unsigned() && j->get<uint64_t>() > uint64_t(INT64_MAX))
    throw ApiError::invalid(name, cat("must be from ", low, " to ", high));
  const int64_t v = j->get<int64_t>();
  if (v < low || v > high) throw ApiError::invalid(name, cat("must be from ", low, " to ", high, ", not ", v));
  return v;
}

bool bool_field(const json& object, const char* name, const std::string& param) {
  const json* j = field(object, name);
  if (!j) return false;
  if (!j->is_boolean()) wrong_type(param, "true or false", *j);
  return j->get<bool>();
}

void refuse_unsupported(const json& body) {
  if (bool_field(body, "logprobs", "logprobs") || field(body, "top_logprobs"))
    throw ApiError::invalid("logprobs", "log probabilities are not supported by qvl serve", "unsupported_parameter");
  for (const char* name : {"tools", "functions"})
    if (const json* j = field(body, name); j && !(j->is_array() && j->empty()))
      throw ApiError::invalid(name, "tool calls are not supported by qvl serve", "unsupported_parameter");
  if (const json* j = field(body, "tool_choice"); j && *j != "none" && *j != "auto")
    throw ApiError::invalid("tool_choice", "tool calls are not supported by qvl serve", "unsupported_parameter");
  if (const json* j = field(body, "response_format")) {
    if (!j->is_object()) wrong_type("response_format", "an object", *j);
    if (const json* type = field(*j, "type"); type && *type != "text")
      throw ApiError::invalid("response_format.type", "only \"text\" is supported by qvl serve", "unsupported_parameter");
  }
  if (const auto n = integer_field(body, "n", 1, 128); n && *n != 1)
    throw ApiError::invalid("n", cat("qvl serve gives one answer a request (n = 1), not ", *n), "unsupported_parameter");
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A picture's local path (a plain path or a file:// URL of this machine, percent-escapes decoded), refused unless it
// lies inside `dir` once links and ".." are resolved.
std::filesystem::path allowed_local_file(const std::string& url, const std::string& param, const std::filesystem::path& dir) {
  std::string path = url;
  if (starts_with(url, "file://")) {
    std::string rest = url.substr(7);
    if (starts_with(rest, "localhost/")) rest = rest.substr(9);
    if (!starts_with(rest, "/"))
      throw ApiError::invalid(param, "a file:// URL names a file of this machine: file:///path", "local_file_outside");
    const auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    path.clear();
    for (std::size_t i = 0; i < rest.size(); ++i) {
      if (rest[i] == '%' && i + 2 < rest.size() && hex(rest[i + 1]) >= 0 && hex(rest[i + 2]) >= 0) {
        path += char(hex(rest[i + 1]) * 16 + hex(rest[i + 2]));
        i += 2;
      } else {
        path += rest[i];
      }
    }
  }
  if (path.find('\0') != std::string::npos) throw ApiError::invalid(param, "a path holding a NUL byte");
  const std::filesystem::path root = std::filesystem::weakly_canonical(dir);
  std::filesystem::path file = path;
  file = std::filesystem::weakly_canonical(file.is_relative() ? root / file : file);
  const auto inside = file.lexically_relative(root);
  if (inside.empty() || *inside.begin() == "..")  // links and ".." resolved (where they lead is not told the client)
    throw ApiError::invalid(param, cat("'", url, "' is or leads (through a link or '..') outside the folder qvl serve's "
                                       "--allow-local-files allows"), "local_file_outside");
  return file;
}

// A picture from a data: URL, or a file inside the folder --allow-local-files names; sized (and so checked against
// the pixel limit) from its header here, before anything is decoded.
ImageInput image_of(const std::string& url, const std::string& param, const RequestLimits& limits) {
  std::optional<ImageInput> image;
  try {
    if (auto data = parse_data_url(url, uint64_t(limits.image.max_file_bytes))) {
      image = ImageInput::encoded(std::make_shared<const std::string>(std::move(data->bytes)), param, limits.image);
    } else if (starts_with(url, "http://") || starts_with(url, "https://")) {
      throw ApiError::invalid(param, "qvl serve does not fetch URLs (it makes no network requests); send the picture as "
                                     "a data URL (data:image/png;base64,...)", "unsupported_image_url");
    } else {
      if (limits.local_files_dir.empty())
        throw ApiError::invalid(param, "local files are read only when qvl serve runs with --allow-local-files DIR; "
                                       "send the picture as a data URL (data:image/png;base64,...)", "local_files_not_allowed");
      const std::filesystem::path path = allowed_local_file(url, param, limits.local_files_dir);
      // Read once, here, just after the check: a path swapped for a link later cannot take the request elsewhere.
      auto bytes = std::make_shared<const std::string>(
          read_whole_file(path, std::uintmax_t(limits.image.max_file_bytes), "an image file"));
      image = ImageInput::encoded(std::move(bytes), param, limits.image);
    }
    image->size();  // the header read and checked now: a bad picture is this request's error, named
  } catch (const std::filesystem::filesystem_error& e) {
    throw ApiError::invalid(param, e.what());
  } catch (const Error& e) {
    const std::string message = e.what();
    throw ApiError(400, "invalid_request_error", starts_with(message, param.c_str()) ? message : param + ": " + message, param);
  }
  return std::move(*image);
}

struct ParsedMessages {
  std::vector<ChatMessage> messages;
  std::vector<ImageInput> images;
  std::string opening;  // what names the conversation: the messages up to the first user turn, images by content
};

ParsedMessages parse_messages(const json& body, const RequestLimits& limits) {
  const json* list = field(body, "messages");
  if (!list) throw ApiError::invalid("messages", "is required");
  if (!list->is_array()) wrong_type("messages", "an array", *list);
  if (list->empty()) throw ApiError::invalid("messages", "must hold at least one message");
  ParsedMessages out;
  bool opening_done = false;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& m = (*list)[i];
    const std::string at = cat("messages[", i, "]");
    if (!m.is_object()) wrong_type(at, "an object", m);
    const json* role_field = field(m, "role");
    if (!role_field) throw ApiError::invalid(at + ".role", "is required");
    if (!role_field->is_string()) wrong_type(at + ".role", "a string", *role_field);
    std::string role = role_field->get<std::string>();
    if (role == "tool" || role == "function")
      throw ApiError::invalid(at + ".role", cat("role '", role, "' is not supported (qvl serve has no tool calls)"));
    if (role != "system" && role != "developer" && role != "user" && role != "assistant")
      throw ApiError::invalid(at + ".role", cat("unknown role '", role, "': use system, developer, user or assistant"));
    if (role == "developer") role = "system";  // the newer OpenAI name of the system prompt
    if (const json* calls = field(m, "tool_calls"); calls && !(calls->is_array() && calls->empty()))
      throw ApiError::invalid(at + ".tool_calls", "tool calls are not supported by qvl serve");
    ChatMessage message{role, {}};
    const json* content = field(m, "content");
    if (!content) {
      if (role != "assistant") throw ApiError::invalid(at + ".content", "is required");
    } else if (content->is_string()) {
      message.content.push_back(ContentItem::make_text(content->get<std::string>()));
    } else if (content->is_array()) {
      for (std::size_t j = 0; j < content->size(); ++j) {
        const json& part = (*content)[j];
        const std::string part_at = cat(at, ".content[", j, "]");
        if (!part.is_object()) wrong_type(part_at, "an object", part);
        const json* type = field(part, "type");
        if (!type || !type->is_string()) throw ApiError::invalid(part_at + ".type", "must be \"text\" or \"image_url\"");
        if (*type == "text") {
          const json* text = field(part, "text");
          if (!text || !text->is_string()) throw ApiError::invalid(part_at + ".text", "must be a string");
          message.content.push_back(ContentItem::make_text(text->get<std::string>()));
        } else if (*type == "image_url") {
          if (role != "user") throw ApiError::invalid(part_at, "pictures go in user messages");
          const json* image_url = field(part, "image_url");
          const json* url = image_url && image_url->is_object() ? field(*image_url, "url") : image_url;
          if (!url || !url->is_string()) throw ApiError::invalid(part_at + ".image_url.url", "must be a string (a data: URL)");
          if (int64_t(out.images.size()) >= limits.max_images)
            throw ApiError::invalid("messages", cat("more than ", limits.max_images, " pictures in one request (the limit; "
                                                    "qvl serve --max-images sets it)"), "too_many_images");
          out.images.push_back(image_of(url->get<std::string>(), part_at + ".image_url.url", limits));
          message.content.push_back(ContentItem::image());
        } else {
          throw ApiError::invalid(part_at + ".type", cat("content part type ", type->dump(), " is not supported (text and "
                                                         "image_url are)"));
        }
      }
    } else {
      wrong_type(at + ".content", "a string or an array of parts", *content);
    }
    if (!opening_done) {
      out.opening += role + '\0';
      std::size_t image = out.images.size() - std::size_t(std::count_if(message.content.begin(), message.content.end(),
                                                   [](const ContentItem& c) { return c.kind == ContentItem::Kind::Image; }));
      for (const auto& item : message.content)
        out.opening += item.kind == ContentItem::Kind::Image ? cat("\1image ", out.images[image++].content_key(), '\1')
                                                             : item.text + '\0';
      opening_done = role == "user";
    }
    out.messages.push_back(std::move(message));
  }
  return out;
}

std::vector<std::string> parse_stop(const json& body) {
  const json* stop = field(body, "stop");
  if (!stop) return {};
  std::vector<std::string> out;
  if (stop->is_string()) {
    out.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > 4) throw ApiError::invalid("stop", cat("takes at most 4 strings, not ", stop->size()));
    for (std::size_t i = 0; i < stop->size(); ++i) {
      if (!(*stop)[i].is_string()) wrong_type(cat("stop[", i, "]"), "a string", (*stop)[i]);
      out.push_back((*stop)[i].get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", *stop);
  }
  for (const auto& s : out)
    if (s.empty()) throw ApiError::invalid("stop", "an empty string would stop before the answer begins");
  return out;
}

}  // namespace

ChatRequest parse_chat_request(const json& body, const GenerationConfig& defaults, const RequestLimits& limits) {
  if (!body.is_object()) wrong_type("", "a JSON object", body);
  if (const json* model = field(body, "model"); model && !model->is_string()) wrong_type("model", "a string", *model);
  refuse_unsupported(body);
  ChatRequest request;
  request.stream = bool_field(body, "stream", "stream");
  if (const json* options = field(body, "stream_options")) {
    if (!request.stream) throw ApiError::invalid("stream_options", "is only allowed with \"stream\": true");
    if (!options->is_object()) wrong_type("stream_options", "an object", *options);
    request.include_usage = bool_field(*options, "include_usage", "stream_options.include_usage");
  }
  request.stop = parse_stop(body);

  GenerateRequest& g = request.generate;
  const auto max_tokens = integer_field(body, "max_tokens", 1, limits.max_context);
  const auto max_completion_tokens = integer_field(body, "max_completion_tokens", 1, limits.max_context);
  g.max_new_tokens = max_completion_tokens.value_or(max_tokens.value_or(limits.default_max_tokens));
  g.answer_fits_context = !max_tokens && !max_completion_tokens;  // no length asked: what the context leaves
  SamplingOptions& s = g.sampling;
  s.temperature = number_field(body, "temperature", 0, 2).value_or(defaults.do_sample ? defaults.temperature : 0.0);
  s.top_k = integer_field(body, "top_k", 0, limits::kVocabulary).value_or(defaults.do_sample ? defaults.top_k : 0);
  s.top_p = number_field(body, "top_p", 0, 1).value_or(defaults.do_sample ? defaults.top_p : 1.0);
  if (s.top_p == 0) throw ApiError::invalid("top_p", "must be above 0 (1 keeps every token)");
  s.repetition_penalty = number_field(body, "repetition_penalty", 0, 100).value_or(defaults.repetition_penalty);
  if (s.repetition_penalty == 0) throw ApiError::invalid("repetition_penalty", "must be above 0 (1 is off)");
  s.presence_penalty = number_field(body, "presence_penalty", -2, 2).value_or(0.0);
  s.frequency_penalty = number_field(body, "frequency_penalty", -2, 2).value_or(0.0);
  if (const auto seed = integer_field(body, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = uint64_t(*seed);
  } else {
    s.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  }

  ParsedMessages parsed = parse_messages(body, limits);
  g.messages = std::move(parsed.messages);
  g.images = std::move(parsed.images);
  const uint64_t key = content_hash({reinterpret_cast<const std::byte*>(parsed.opening.data()), parsed.opening.size()});
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
  g.conversation_id = std::string("serve:") + hex;
  return request;
}

}  // namespace qvl::serve
