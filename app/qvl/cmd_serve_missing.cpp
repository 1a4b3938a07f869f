// qvl serve in a build without cpp-httplib (app/CMakeLists.txt): the command exists and says why it cannot run.
#include "core/error.h"
#include "qvl/commands.h"

namespace qvl::cli {

int run_serve(const std::vector<std::string>&) {
  fail("qvl serve: this build of qvl has no HTTP server (libcpp-httplib-dev was not installed when it was built)");
}

}  // namespace qvl::cli
