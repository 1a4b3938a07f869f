#include "serve/server.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <random>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "qvl/version.h"
#include "serve/openai_format.h"
#include "serve/stop_strings.h"

namespace qvl::serve {

using nlohmann::json;

// One request from the queue to its last token: filled by the engine thread, read by the HTTP thread that waits on it.
struct Job {
  explicit Job(ChatRequest r) : request(std::move(r)) {}
  ChatRequest request;
  ResponseHeader header;
  std::atomic<bool> cancel{false};  // the client went away, a stop string appeared or the server is stopping

  std::mutex mutex;  // guards what follows
  std::condition_variable changed;
  bool prompt_done = false, finished = false;
  std::string pending;  // text shown by the engine that the stream has not written yet
  std::string content;  // all the text shown
  bool stop_string_seen = false;
  GenerateResult result;
  std::optional<ApiError> error;  // before prompt_done: the request's answer; after: an error event in the stream
};

namespace {

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string response_id() {
  static std::mt19937_64 random{std::random_device{}()};
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  char id[32];
  std::snprintf(id, sizeof id, "chatcmpl-%016llx", static_cast<unsigned long long>(random()));
  return id;
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e, int retry_after_s = 0) {
  if (retry_after_s > 0) res.set_header("Retry-After", std::to_string(retry_after_s));
  send_json(res, e.status, e.body());
}

// Compares without stopping at the first difference, so the time taken says nothing about the key.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

// The engine's tokens, passed through the stop strings into the job (and the waiting stream).
class JobSink final : public TokenSink {
public:
  explicit JobSink(Job& job) : job_(job), stops_(job.request.stop) {}
  void on_prompt_done(const GenerateTiming&) override {
    std::lock_guard lock(job_.mutex);
    job_.prompt_done = true;
    job_.changed.notify_all();
  }
  void on_token(int32_t, const std::string& text) override { show(stops_.push(text)); }
  void finish() { show(stops_.finish()); }

private:
  void show(const std::string& text) {
    std::lock_guard lock(job_.mutex);
    job_.pending += text;
    job_.content += text;
    if (stops_.stopped() && !job_.stop_string_seen) {
      job_.stop_string_seen = true;
      job_.cancel = true;  // the engine stops after this token
    }
    job_.changed.notify_all();
  }
  Job& job_;
  StopStrings stops_;
};

// An engine error before the prompt ran is the request's (a limit, an unreadable picture) unless the GPU failed.
ApiError engine_error(const std::string& message, bool device_failed) {
  if (device_failed) return {500, "server_error", message, "", "device_error"};
  const bool context = message.find("context limit") != std::string::npos ||
                       message.find("tokens of context") != std::string::npos;
  return {400, "invalid_request_error", message, "messages", context ? "context_length_exceeded" : ""};
}

}  // namespace

ApiServer::ApiServer(ServeOptions options) : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  started_ = unix_time();
  // Threads: one per request the queue holds and the running one, and a few more so that /health, refusals and
  // idle keep-alive connections never wait behind them.
  const int threads = options_.queue + 1 + 4;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(std::size_t(threads)); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_timeout(5);
  route();
}

ApiServer::~ApiServer() {
  stop();
  if (engine_thread_.joinable()) engine_thread_.join();
}

int ApiServer::bind() {
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host) :
                   (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port <= 0)
    fail("qvl serve: cannot listen on ", options_.host, ":", options_.port, " (in use, not an address of this machine, or "
         "a port below 1024 without the right)");
  return port;
}

void ApiServer::serve(const std::function<void(const std::string&)>& log) {
  serving_ = true;
  engine_thread_ = std::thread([this, &log] { engine_thread(log); });
  http_->listen_after_bind();
  listening_done_ = true;
  stop();  // listening ended (stop() from a signal, or the model could not load): the engine thread ends too
  engine_thread_.join();
  if (!load_error_.empty()) fail(load_error_);
}

void ApiServer::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;  // httplib's stop is called once: a second call while it winds down may assert
    stopping_ = true;
    for (auto& job : waiting_) {
      std::lock_guard job_lock(job->mutex);
      job->error = ApiError(503, "server_error", "qvl serve is shutting down", "", "shutting_down");
      job->finished = true;
      job->changed.notify_all();
    }
    waiting_.clear();
    if (running_) running_->cancel = true;
  }
  wake_.notify_all();
  // httplib ignores a stop that comes before its listening loop has begun: wait for the loop (it begins at once).
  while (serving_ && !listening_done_ && !http_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();
}

void ApiServer::engine_thread(const std::function<void(const std::string&)>& log) {
  try {
    EngineOptions options = options_.engine;
    options.load_progress = [this](double fraction) { load_progress_ = fraction; };
    engine_ = Engine::load(options_.model_dir, options);
    defaults_ = engine_->model().generation;
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(mutex_);
      load_error_ = cat(options_.model_dir.string(), ": the model could not be loaded: ", e.what());
    }
    stop();
    return;
  }
  const auto status = [this] {
    const ConversationCacheStats kept = engine_->conversation_cache();
    return json{{"device", engine_->device()},
                {"backend", engine_->backend_name()},
                {"weights", engine_->weights()},
                {"conversations", {{"kept", kept.conversations}, {"tokens", kept.tokens}, {"bytes", kept.bytes}}}};
  };
  {
    std::lock_guard lock(mutex_);
    engine_status_ = status();
  }
  ready_ = true;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
  }
  log(cat("ready: ", options_.model_id, " on ", engine_->backend_name(), ", weights ", engine_->weights()));
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !waiting_.empty(); });
      if (stopping_) return;
      job = running_ = waiting_.front();
      waiting_.pop_front();
    }
    run(*job);
    std::lock_guard lock(mutex_);
    running_.reset();
    engine_status_ = status();
  }
}

void ApiServer::run(Job& job) {
  JobSink sink(job);
  std::optional<ApiError> error;
  GenerateResult result;
  try {
    result = engine_->generate(job.request.generate, &sink, &job.cancel);
    sink.finish();
  } catch (const Error& e) {
    error = engine_error(e.what(), !engine_->device_error().empty());
  } catch (const std::exception& e) {  // out of memory and the like: the server's trouble, not the request's
    error = ApiError(500, "server_error", cat("qvl serve could not answer: ", e.what()), "", "internal_error");
  }
  bool stopping;
  {
    std::lock_guard lock(mutex_);
    stopping = stopping_;
  }
  std::lock_guard lock(job.mutex);
  if (!error && result.stop_reason == "cancelled" && !job.stop_string_seen && stopping)
    error = ApiError(503, "server_error", "qvl serve is shutting down: the answer was cut short", "", "shutting_down");
  if (error && job.prompt_done && error->status == 400) error->status = 500, error->type = "server_error";
  job.error = std::move(error);
  job.result = std::move(result);
  job.finished = true;
  job.changed.notify_all();
}

bool ApiServer::has_room(std::string* refusal) const {
  std::lock_guard lock(mutex_);
  if (stopping_) {
    *refusal = "qvl serve is shutting down";
    return false;
  }
  if (int(waiting_.size()) >= options_.queue) {
    *refusal = cat("qvl serve is busy: ", waiting_.size(), " requests are waiting, the limit (qvl serve --queue)");
    return false;
  }
  return true;
}

std::shared_ptr<Job> ApiServer::enqueue(ChatRequest request, std::string* refusal) {
  auto job = std::make_shared<Job>(std::move(request));
  job->header = {response_id(), unix_time(), options_.model_id, ""};
  if (!has_room(refusal)) return nullptr;  // asked again: the room may have gone while the request was read
  std::lock_guard lock(mutex_);
  job->header.system_fingerprint = cat("qvl-", QVL_VERSION, "-", engine_status_.value("device", ""), "-",
                                       engine_status_.value("weights", ""));
  waiting_.push_back(job);
  wake_.notify_all();
  return job;
}

namespace {
// The endpoints by the method they take: another method gets 405, not 404 (/v1/models/ID too, whatever the ID: a
// model this server does not have is its GET's 404).
constexpr std::pair<std::string_view, std::string_view> kEndpoints[] = {
    {"/v1/chat/completions", "POST"}, {"/v1/models", "GET"}, {"/health", "GET"}};
constexpr std::string_view kModelPath = "/v1/models/";  // followed by a model's id

std::string method_of(const std::string& path) {  // "" for no such endpoint
  for (const auto& [endpoint, method] : kEndpoints)
    if (path == endpoint) return std::string(method);
  if (path.size() > kModelPath.size() && path.starts_with(kModelPath)) return "GET";
  return "";
}

std::string endpoint_list() {  // "/v1/chat/completions, /v1/models and /health"
  std::string list;
  for (std::size_t i = 0; i < std::size(kEndpoints); ++i)
    list += (i == 0 ? "" : i + 1 == std::size(kEndpoints) ? " and " : ", ") + std::string(kEndpoints[i].first);
  return list;
}
}  // namespace

void ApiServer::route() {
  // Errors httplib answers itself (a body over the limit, an unknown path) in the OpenAI shape too.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 413)
      send_error(res, ApiError(413, "invalid_request_error", cat("the request body is over the limit of ",
                               options_.max_body_bytes, " bytes (qvl serve --max-body-mb)"), "", "request_too_large"));
    else if (res.status == 404)
      send_error(res, ApiError(404, "invalid_request_error", cat("no such endpoint: ", req.method, " ", req.path,
                               " (qvl serve has ", endpoint_list(), ")"), "", "unknown_url"));
    else if (res.status == 400)  // httplib could not parse the request; it does not say where
      send_error(res, ApiError(400, "invalid_request_error", "the request is not well-formed HTTP/1.1 (its request line, "
                               "a header, or a header over the size limit)", "", "malformed_request"));
    else
      send_error(res, ApiError(res.status, "invalid_request_error", cat("HTTP ", res.status)));
    return httplib::Server::HandlerResponse::Handled;
  }));
  const auto authorised = [this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty()) return true;
    const std::string given = req.get_header_value("Authorization");
    const bool bearer = given.size() > 7 && std::equal(given.begin(), given.begin() + 7, "bearer ",
                                                        [](char a, char b) { return std::tolower(uint8_t(a)) == b; });
    if (bearer && same_secret(given.substr(7), options_.api_key)) return true;
    send_error(res, ApiError(401, "authentication_error",
                             given.empty() ? "this server needs an API key: send the header \"Authorization: Bearer KEY\""
                                           : "the API key is not this server's", "", "invalid_api_key"));
    return false;
  };
  // Before httplib reads a body: the key, and only bodies whose size is known and that are not compressed. The
  // payload limit is checked against Content-Length; a chunked or gzip/br body would be read (and inflated) whole.
  http_->set_pre_routing_handler([authorised](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) == 0 && !authorised(req, res)) {
      res.set_header("Connection", "close");  // the body is never read: the connection cannot carry another request
      return httplib::Server::HandlerResponse::Handled;
    }
    // An endpoint asked with the other method (HEAD is GET's), before anything about a body: 405, not 404 or 411.
    std::optional<ApiError> refused;
    const std::string allowed = method_of(req.path);
    if (!allowed.empty() && req.method != allowed && !(req.method == "HEAD" && allowed == "GET")) {
      res.set_header("Allow", allowed);
      refused = ApiError(405, "invalid_request_error", cat(req.path, " takes ", allowed, ", not ", req.method), "",
                         "method_not_allowed");
    } else if (const std::string length = req.get_header_value("Content-Length");
               !length.empty() && length.find_first_not_of("0123456789") != std::string::npos) {
      refused = ApiError(400, "invalid_request_error", cat("Content-Length must be a number of bytes, not '", length, "'"),
                         "", "malformed_request");
    } else if (req.method == "POST") {
      if (req.has_header("Transfer-Encoding") || !req.has_header("Content-Length"))
        refused = ApiError(411, "invalid_request_error", "send the body with a Content-Length (chunked bodies are not "
                           "read: the size limit is checked before reading)", "", "length_required");
      const std::string encoding = req.get_header_value("Content-Encoding");
      if (!encoding.empty() && encoding != "identity")
        refused = ApiError(415, "invalid_request_error", cat("the body must not be compressed (Content-Encoding: ",
                           encoding, ")"), "", "unsupported_encoding");
    }
    if (!refused) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, *refused);
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "server_error", cat("qvl serve could not answer: ", what), "", "internal_error"));
  });

  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready_) {
      send_json(res, 503, {{"status", "loading"}, {"progress", load_progress_.load()}});
      return;
    }
    std::lock_guard lock(mutex_);
    json body = engine_status_;
    body["status"] = "ok";
    body["model"] = options_.model_id;
    body["queue"] = {{"running", running_ ? 1 : 0}, {"waiting", waiting_.size()}, {"capacity", options_.queue}};
    send_json(res, 200, body);
  });

  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, models_json(options_.model_id, started_));
  });
  http_->Get(std::string(kModelPath) + "(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] == options_.model_id)
      send_json(res, 200, models_json(options_.model_id, started_)["data"][0]);
    else
      send_error(res, ApiError(404, "invalid_request_error", cat("no model '", req.matches[1].str(), "' here; this server "
                               "has '", options_.model_id, "'"), "model", "model_not_found"));
  });

  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (!ready_) {
      send_error(res, ApiError(503, "server_error", cat("the model is still loading (", int(load_progress_ * 100), "%)"),
                               "", "model_loading"), 2);
      return;
    }
    std::shared_ptr<Job> job;
    try {
      json body;
      try {
        body = json::parse(req.body);
      } catch (const json::parse_error& e) {
        throw ApiError(400, "invalid_request_error", cat("the body is not valid JSON: ", e.what()), "", "invalid_json");
      }
      std::string refusal;
      if (!has_room(&refusal)) {  // before the pictures are decoded from base64 for nothing
        send_error(res, ApiError(503, "server_error", refusal, "", "server_busy"), 1);
        return;
      }
      job = enqueue(parse_chat_request(body, defaults_, options_.limits), &refusal);
      if (!job) {
        send_error(res, ApiError(503, "server_error", refusal, "", "server_busy"), 1);
        return;
      }
    } catch (const ApiError& e) {
      send_error(res, e);
      return;
    } catch (const Error& e) {  // a picture that could not be read while the request was checked
      send_error(res, ApiError(400, "invalid_request_error", e.what(), "messages"));
      return;
    }
    std::unique_lock lock(job->mutex);
    job->changed.wait(lock, [&] { return job->prompt_done || job->finished; });
    if (!job->request.stream || !job->prompt_done) {
      job->changed.wait(lock, [&] { return job->finished; });
      if (job->error)
        send_error(res, *job->error);
      else
        send_json(res, 200, completion_json(job->header, job->content, finish_reason(job->result, job->stop_string_seen),
                                            job->result));
      return;
    }
    lock.unlock();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job](std::size_t, httplib::DataSink& sink) {
          const auto write = [&](const std::string& event) {
            if (sink.write(event.data(), event.size())) return true;
            job->cancel = true;  // the client went away: the engine stops after its current token
            return false;
          };
          if (!write(server_sent_event(chunk_json(job->header, {{"role", "assistant"}, {"content", ""}}, nullptr))))
            return false;
          std::unique_lock job_lock(job->mutex);
          for (;;) {
            job->changed.wait(job_lock, [&] { return !job->pending.empty() || job->finished; });
            const std::string text = std::exchange(job->pending, {});
            const bool finished = job->finished;
            job_lock.unlock();
            if (!text.empty() && !write(server_sent_event(chunk_json(job->header, {{"content", text}}, nullptr)))) return false;
            if (finished) break;
            job_lock.lock();
          }
          // The job is finished: nothing writes it any more.
          if (job->error) {
            if (!write(server_sent_event(job->error->body()))) return false;
          } else {
            if (!write(server_sent_event(chunk_json(job->header, json::object(),
                                                    finish_reason(job->result, job->stop_string_seen)))))
              return false;
            if (job->request.include_usage && !write(server_sent_event(usage_chunk_json(job->header, job->result))))
              return false;
          }
          if (!write(kStreamEnd)) return false;
          sink.done();
          return true;
        },
        [job](bool success) {
          if (!success) job->cancel = true;
        });
  });
}

}  // namespace qvl::serve
