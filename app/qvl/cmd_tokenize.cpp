#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/paths.h"
#include "qvl/args.h"
#include "qvl/commands.h"
#include "text/tokenizer.h"

namespace qvl::cli {

namespace {

std::shared_ptr<const Tokenizer> load_tokenizer(const Args& args) {
  const std::filesystem::path dir = args.get("model", default_model_dir().string());
  return Tokenizer::load(dir / "tokenizer.json");
}

std::vector<TokenId> parse_ids(const std::string& text) {
  std::vector<TokenId> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > 0x7fffffff) fail("qvl detokenize: '", item, "' is not a token id");
    ids.push_back(TokenId(v));
  }
  return ids;
}

}  // namespace

int run_tokenize(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder whose tokenizer.json is used (default: the demo model)"},
      {"text", "TEXT", "the text to tokenise"},
      {"file", "FILE", "tokenise the contents of a file instead"},
      {"json", "", "print {\"ids\": [...]}"},
      {"help", "", "show this help"},
  };
  const auto parsed = parse_or_help("tokenize", "Prints the token ids of a text, exactly as the Hugging Face tokenizer gives them.", argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  if (args.has("text") == args.has("file")) fail("qvl tokenize: give exactly one of --text or --file");
  std::string text = args.get("text");
  if (args.has("file")) {
    text = read_text_file(args.get("file"));
  }
  const auto ids = load_tokenizer(args)->encode(text);
  if (args.has("json")) {
    std::printf("%s\n", nlohmann::json{{"ids", ids}}.dump().c_str());
  } else {
    for (std::size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("\n");
  }
  return 0;
}

int run_detokenize(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder whose tokenizer.json is used (default: the demo model)"},
      {"ids", "LIST", "comma-separated token ids"},
      {"skip-special", "", "leave out special tokens"},
      {"help", "", "show this help"},
  };
  const auto parsed = parse_or_help("detokenize", "Prints the text of token ids.", argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  if (!args.has("ids")) fail("qvl detokenize: --ids is required");
  const auto tokenizer = load_tokenizer(args);
  const auto ids = parse_ids(args.get("ids"));
  std::printf("%s\n", tokenizer->decode(ids, args.has("skip-special")).c_str());
  return 0;
}

int run_bench_tokenizer(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder whose tokenizer.json is used (default: the demo model)"},
      {"file", "FILE", "text to tokenise (default: a built-in mix of prose, code and CJK, about 1 MB)"},
      {"repeat", "N", "timed passes after the first (default 5)"},
      {"json", "", "print one JSON object"},
      {"help", "", "show this help"},
  };
  const auto parsed = parse_or_help("bench-tokenizer", "Measures tokenizer throughput (first pass and the median of warm passes).", argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  std::string text;
  if (args.has("file")) {
    text = read_text_file(args.get("file"));
  } else {
    const std::string sample =
        "The quick brown fox jumps over the lazy dog; it's 12:45 and 3.14159 isn't rational.\n"
        "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
        "机器学习是人工智能的一个分支。日本語のテキスト、한국어 문장. Ünïcödé café naïve résumé 👍🏽\n\n";
    for (int i = 0; text.size() < (1u << 20); ++i) text += sample + std::to_string(i) + " ";
  }
  const int repeat = int(std::max<int64_t>(1, args.get_int("repeat", 5)));
  const auto tokenizer = load_tokenizer(args);
  using clock = std::chrono::steady_clock;
  auto timed = [&] {
    const auto t0 = clock::now();
    const auto n = tokenizer->encode(text).size();
    return std::pair{std::chrono::duration<double>(clock::now() - t0).count(), n};
  };
  const auto [first_s, tokens] = timed();  // fills the per-piece cache
  std::vector<double> warm;
  for (int i = 0; i < repeat; ++i) warm.push_back(timed().first);
  std::sort(warm.begin(), warm.end());
  const double median = warm[warm.size() / 2];
  const double mb = double(text.size()) / 1e6;
  if (args.has("json")) {
    std::printf("%s\n", nlohmann::json{{"bytes", text.size()}, {"tokens", tokens}, {"first_pass_s", first_s},
                                       {"first_pass_mb_per_s", mb / first_s}, {"warm_median_s", median},
                                       {"warm_mb_per_s", mb / median}, {"warm_tokens_per_s", double(tokens) / median},
                                       {"repeats", repeat}}.dump(2).c_str());
  } else {
    std::printf("%zu bytes -> %zu tokens\nfirst pass: %.3f s (%.1f MB/s)\nwarm median of %d: %.3f s (%.1f MB/s, %.2f M tokens/s)\n",
                text.size(), tokens, first_s, mb / first_s, repeat, median, mb / median, double(tokens) / median / 1e6);
  }
  return 0;
}

}  // namespace qvl::cli
