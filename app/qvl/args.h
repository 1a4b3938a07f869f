#pragma once
// Command-line options of the `qvl` subcommands: `--name value`, `--name=value` and `--flag`. Unknown options and
// malformed numbers are errors that name the option.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace qvl::cli {

struct OptionSpec {
  std::string name;  // without the dashes
  std::string value_name;  // empty for a flag
  std::string help;
};

class Args {
public:
  Args(const std::string& command, const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs);

  bool has(const std::string& name) const { return values_.contains(name); }
  // The option's value; throws qvl::Error when it was given more than once (a list option is read with all()).
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& name) const;  // every value, in order
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;

private:
  std::string command_;
  std::map<std::string, std::vector<std::string>> values_;
};

std::string usage(const std::string& command, const std::string& summary, const std::vector<OptionSpec>& specs);

// Parses the options; when --help was given, prints the usage and returns nothing (the command then exits 0).
// Every command lists a "help" option for this.
std::optional<Args> parse_or_help(const std::string& command, const std::string& summary, const std::vector<std::string>& argv,
                                  const std::vector<OptionSpec>& specs);

// The whole contents of a file of at most limits::kTextFileBytes (--file of tokenize and bench-tokenizer); throws
// qvl::Error naming it when it cannot be read or is larger.
std::string read_text_file(const std::string& path);

}  // namespace qvl::cli
