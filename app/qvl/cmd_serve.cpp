#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "core/paths.h"
#include "model/weights.h"
#include "qvl/args.h"
#include "qvl/commands.h"
#include "qvl/gpu_options.h"
#include "serve/server.h"

namespace qvl::cli {

namespace {

int64_t int_in(const Args& args, const char* name, int64_t fallback, int64_t low, int64_t high) {
  const int64_t v = args.get_int(name, fallback);
  if (v < low || v > high) fail("qvl serve: --", name, " takes ", low, " to ", high, ", not ", v);
  return v;
}

void say(const std::string& line) {
  std::printf("qvl serve: %s\n", line.c_str());
  std::fflush(stdout);
}

bool is_loopback(const std::string& host) { return host == "127.0.0.1" || host == "localhost" || host == "::1"; }

}  // namespace

int run_serve(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder (default: the embedded demo model)"},
      {"model-name", "NAME", "the model's id in /v1/models and in answers (default: the folder's name)"},
      {"host", "ADDRESS", "address to listen on (default 127.0.0.1: this machine only)"},
      {"port", "N", "port to listen on (default 8080; 0: any free port, printed)"},
      {"api-key", "KEY", "clients must send \"Authorization: Bearer KEY\" (default: the QVL_API_KEY environment "
                         "variable; none: no key asked)"},
      {"allow-local-files", "DIR", "pictures may be given as paths or file:// URLs inside DIR (default: data URLs only)"},
      {"queue", "N", "requests that may wait behind the one being answered; more get 503 (default 8)"},
      {"max-images", "N", "pictures in one request (default 16)"},
      {"max-image-pixels", "N", "pixels of one picture, read from its header before decoding (default 67108864)"},
      {"max-body-mb", "N", "size of a request's body in MiB (default 64)"},
      {"default-max-tokens", "N", "longest answer when a request names no max_tokens, shortened to what the context "
                                   "leaves after the prompt (default 1024)"},
      {"device", "NAME", "auto (default), cpu or cuda"},
      {"weights", "FORMAT", "bf16 (as stored), " + WeightPolicy::quantised_names() + " or auto, as for qvl generate"},
      {"help", "", "show this help"},
  };
  const std::vector<OptionSpec> gpu_specs = gpu_option_specs();
  specs.insert(specs.end() - 1, gpu_specs.begin(), gpu_specs.end());
  const auto parsed = parse_or_help("serve", "Serves the model through an OpenAI-compatible HTTP API (/v1/chat/completions).",
                                    argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;

  serve::ServeOptions options;
  options.model_dir = args.get("model", default_model_dir().string());
  // Checked before the port is taken: the model loads after the server listens (its state shows in /health).
  if (!std::filesystem::is_directory(options.model_dir))
    fail("qvl serve: --model ", options.model_dir.string(), ": not a folder");
  if (args.has("model-name") && args.get("model-name").empty()) fail("qvl serve: --model-name must not be empty");
  options.model_id = args.get("model-name", std::filesystem::path(options.model_dir).lexically_normal().filename().string());
  if (options.model_id.empty()) options.model_id = std::filesystem::path(options.model_dir).parent_path().filename().string();
  options.host = args.get("host", "127.0.0.1");
  options.port = int(int_in(args, "port", 8080, 0, 65535));
  const char* env_key = std::getenv("QVL_API_KEY");
  options.api_key = args.get("api-key", env_key ? env_key : "");
  if (args.has("allow-local-files")) {
    options.limits.local_files_dir = args.get("allow-local-files");
    if (!std::filesystem::is_directory(options.limits.local_files_dir))
      fail("qvl serve: --allow-local-files ", options.limits.local_files_dir.string(), ": not a folder");
  }
  options.queue = int(int_in(args, "queue", 8, 0, 1000));
  options.limits.max_images = int_in(args, "max-images", 16, 1, limits::kImagesPerRequest);
  options.limits.image.max_pixels = int_in(args, "max-image-pixels", limits::kImagePixels, 1, limits::kImagePixels);
  options.max_body_bytes = std::size_t(int_in(args, "max-body-mb", 64, 1, 4096)) << 20;
  apply_gpu_options(args, options.engine);  // --max-context among them, which the answer's default length follows
  options.limits.default_max_tokens =
      int_in(args, "default-max-tokens", std::min<int64_t>(1024, options.engine.max_context), 1, options.engine.max_context);
  options.engine.max_images = options.limits.max_images;
  options.limits.max_context = options.engine.max_context;
  options.engine.device = args.get("device", "auto");
  options.engine.weights = args.get("weights", "bf16");

  // SIGINT and SIGTERM are taken by one thread (sigwait), blocked everywhere else: the handler is ordinary code that
  // stops the server, not an async-signal handler. A client gone mid-write must not kill the process (SIGPIPE).
  signal(SIGPIPE, SIG_IGN);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);  // the server's own "stopped already" wake-up of the watcher
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  serve::ApiServer server(options);
  const int port = server.bind();
  const bool ipv6 = options.host.find(':') != std::string::npos;
  say(cat("listening on http://", ipv6 ? "[" : "", options.host, ipv6 ? "]" : "", ":", port, "/v1"));
  say(cat("loading ", options.model_dir.string(), " as ", options.model_id));
  if (!is_loopback(options.host) && options.api_key.empty())
    say(cat("warning: listening on ", options.host, " without an API key: anyone who can reach this port can use it"));
  // The first signal stops the server after the current token (a model still loading loads first: the load cannot
  // be interrupted); a second one exits at once.
  std::thread watcher([&] {
    for (int signals_seen = 0;; ++signals_seen) {
      int received = 0;
      sigwait(&signals, &received);
      if (received == SIGUSR1) return;
      if (signals_seen > 0) {
        say("a second signal: exiting now");
        std::_Exit(130);
      }
      say(cat(received == SIGINT ? "interrupted" : "terminated", ": finishing the current token"));
      server.stop();
    }
  });
  try {
    server.serve(say);
  } catch (...) {
    pthread_kill(watcher.native_handle(), SIGUSR1);
    watcher.join();
    throw;
  }
  pthread_kill(watcher.native_handle(), SIGUSR1);
  watcher.join();
  say("stopped");
  return 0;
}

}  // namespace qvl::cli
