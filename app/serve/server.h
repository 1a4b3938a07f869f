#pragma once
// qvl serve: the engine behind an OpenAI-compatible HTTP API (cpp-httplib, Debian's libcpp-httplib-dev).
//
// One engine answers one request at a time on its own thread (the "engine thread", which also loads the model, so the
// port answers /health while the weights load). HTTP threads parse and check a request, put it in a bounded queue
// (full: 503 with Retry-After) and wait for it; a stream is written token by token as the engine thread produces
// them, and a client that goes away cancels its answer at the next token. stop() ends the running answer after its
// current token, refuses the queue and makes serve() return.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/engine.h"
#include "serve/chat_request.h"

namespace httplib {
class Server;
}

namespace qvl::serve {

struct ServeOptions {
  std::filesystem::path model_dir;
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;             // 0: any free port (bind() says which)
  std::string api_key;         // non-empty: /v1/* need "Authorization: Bearer <key>"
  std::string model_id;        // what /v1/models lists and answers name (the folder's name)
  RequestLimits limits;
  std::size_t max_body_bytes = std::size_t(64) << 20;
  int queue = 8;               // requests waiting behind the one running; more are refused with 503
};

struct Job;

class ApiServer {
public:
  explicit ApiServer(ServeOptions options);
  ~ApiServer();

  // Binds the address; throws qvl::Error naming it when it cannot. Returns the port (the chosen one for port 0).
  int bind();
  // Loads the model on the engine thread and answers requests until stop(). `log` gets one line per event that a
  // person running the server wants to see (ready, a failed load). Throws qvl::Error when the model cannot load.
  void serve(const std::function<void(const std::string&)>& log);
  // From any thread (a signal watcher): the running answer ends after its current token, waiting ones get 503.
  void stop();

private:
  void engine_thread(const std::function<void(const std::string&)>& log);
  void run(Job& job);
  void route();
  bool has_room(std::string* refusal) const;  // not stopping, and the queue not full
  std::shared_ptr<Job> enqueue(ChatRequest request, std::string* refusal);

  ServeOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Engine> engine_;  // created and used on the engine thread only (destroyed after it has ended)
  GenerationConfig defaults_;       // the model's generation settings, set before ready_
  std::atomic<double> load_progress_{0};
  std::atomic<bool> ready_{false};
  std::string load_error_;
  int64_t started_ = 0;             // Unix time the server started: /v1/models' "created"

  mutable std::mutex mutex_;  // guards what follows, but for the atomics
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> waiting_;
  std::shared_ptr<Job> running_;
  bool stopping_ = false;
  std::atomic<bool> serving_{false}, listening_done_{false};
  nlohmann::json engine_status_;  // device, backend, weights, kept conversations: a copy the HTTP threads may read
  std::thread engine_thread_;
};

}  // namespace qvl::serve
