#pragma once
// Command-line options of the `qvl` subcommands: `--name value`, `--name=value` and `--flag`. Unknown options and
// malformed numbers are errors that name the option.
#include <cstdint>
#include <map>
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
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;

private:
  std::string command_;
  std::map<std::string, std::vector<std::string>> values_;
};

std::string usage(const std::string& command, const std::string& summary, const std::vector<OptionSpec>& specs);

}  // namespace qvl::cli
