#pragma once
#include <string>
#include <vector>

namespace qvl {

// One line per backend for `qvl --version` and the GUI's about box: what is available and, if not, why.
std::vector<std::string> describe_backends();

}  // namespace qvl
