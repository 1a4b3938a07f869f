#pragma once
#include <string>
#include <vector>

namespace qvl::cli {

// Each subcommand takes its arguments (after the subcommand name) and returns the process exit code.
int run_info(const std::vector<std::string>& argv);
int run_make_random_model(const std::vector<std::string>& argv);
int run_bench(const std::vector<std::string>& argv);
int run_generate(const std::vector<std::string>& argv);
int run_quantize(const std::vector<std::string>& argv);
int run_tokenize(const std::vector<std::string>& argv);
int run_detokenize(const std::vector<std::string>& argv);
int run_bench_tokenizer(const std::vector<std::string>& argv);
int run_soak(const std::vector<std::string>& argv);
int run_serve(const std::vector<std::string>& argv);

}  // namespace qvl::cli
