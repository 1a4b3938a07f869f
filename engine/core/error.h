#pragma once
// Errors carry their context as text ("model.safetensors: tensor 'x': offsets past the end of the file"), so that
// a user who pointed the app at a bad file learns which file and which field is wrong.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace qvl {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Concatenates any streamable values into one string.
template <typename... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(cat(std::forward<Parts>(parts)...));
}

}  // namespace qvl
