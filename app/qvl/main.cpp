// qvl: the command-line face of the engine.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/availability.h"
#include "core/error.h"
#include "qvl/commands.h"
#include "qvl/version.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  std::function<int(const std::vector<std::string>&)> run;
};

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"bench", "measure vision, prefill and decode speed against the roofline", qvl::cli::run_bench},
      {"generate", "answer a prompt about images", qvl::cli::run_generate},
      {"info", "summarise a model folder (config, parameters, bytes, dtypes)", qvl::cli::run_info},
      {"make-random-model", "write a random-weight Qwen3-VL model folder", qvl::cli::run_make_random_model},
      {"quantize", "write a model folder with q8/q4 weights (or the floats they stand for)", qvl::cli::run_quantize},
      {"tokenize", "print the token ids of a text", qvl::cli::run_tokenize},
      {"detokenize", "print the text of token ids", qvl::cli::run_detokenize},
      {"bench-tokenizer", "measure tokenizer throughput (MB/s)", qvl::cli::run_bench_tokenizer},
      {"serve", "answer OpenAI API requests over HTTP (/v1/chat/completions)", qvl::cli::run_serve},
      {"soak", "chat for many turns in one process; check memory stays flat", qvl::cli::run_soak},
  };
  return list;
}

void print_version() {
  std::printf("qvl %s (git %s)\n", QVL_VERSION, QVL_GIT_REVISION);
  for (const auto& line : qvl::describe_backends()) std::printf("%s\n", line.c_str());
}

void print_help() {
  std::printf("usage: qvl <command> [options]   (qvl <command> --help for its options)\n\ncommands:\n");
  for (const auto& c : commands()) std::printf("  %-20s %s\n", c.name, c.summary);
  std::printf("\n  --version            version, git revision and available backends\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    print_version();
    return 0;
  }
  for (const auto& c : commands()) {
    if (args[0] != c.name) continue;
    try {
      return c.run({args.begin() + 1, args.end()});
    } catch (const qvl::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "error: unknown command '%s' (see qvl --help)\n", args[0].c_str());
  return 2;
}
