#include "qvl/args.h"

#include <charconv>
#include <cstdio>

#include "io/mapped_file.h"

#include "core/error.h"
#include "core/limits.h"

namespace qvl::cli {

Args::Args(const std::string& command, const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs)
    : command_(command) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) fail("qvl ", command, ": unexpected argument '", arg, "' (see qvl ", command, " --help)");
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const OptionSpec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == name) spec = &s;
    if (!spec) fail("qvl ", command, ": unknown option '--", name, "' (see qvl ", command, " --help)");
    if (spec->value_name.empty()) {
      if (inline_value) fail("qvl ", command, ": option '--", name, "' takes no value");
      values_[name].push_back("");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size()) fail("qvl ", command, ": option '--", name, "' needs a value (", spec->value_name, ")");
      value = argv[++i];
    }
    values_[name].push_back(value);
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  // One value, not the last of several (a second --prompt silently replaced the first); lists are read with all().
  if (it->second.size() > 1)
    fail("qvl ", command_, ": --", name, " was given ", it->second.size(), " times; it takes one value");
  return it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  const auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    fail("qvl ", command_, ": --", name, " expects an integer, got '", text, "'");
  return v;
}

double Args::get_double(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) fail("qvl ", command_, ": --", name, " expects a number, got '", text, "'");
  return v;
}

std::string usage(const std::string& command, const std::string& summary, const std::vector<OptionSpec>& specs) {
  std::string text = "usage: qvl " + command + " [options]\n" + summary + "\n\noptions:\n";
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.value_name.empty() ? "" : " " + s.value_name);
    if (left.size() < 28) left.append(28 - left.size(), ' ');
    text += left + " " + s.help + "\n";
  }
  return text;
}

std::optional<Args> parse_or_help(const std::string& command, const std::string& summary, const std::vector<std::string>& argv,
                                  const std::vector<OptionSpec>& specs) {
  Args args(command, argv, specs);
  if (!args.has("help")) return args;
  std::printf("%s", usage(command, summary, specs).c_str());
  return std::nullopt;
}

std::string read_text_file(const std::string& path) { return read_whole_file(path, limits::kTextFileBytes, "a text file"); }

}  // namespace qvl::cli
