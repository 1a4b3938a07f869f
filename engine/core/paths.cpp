#include "core/paths.h"

#include <cstdlib>
#include <system_error>

namespace qvl {
namespace fs = std::filesystem;

fs::path resource_dir() {
  if (const char* env = std::getenv("QVL_RESOURCE_DIR"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "qvl";
    if (fs::exists(installed / "tokenizer" / "tokenizer.json")) return installed;
  }
  return QVL_BUILD_RESOURCE_DIR;
}

fs::path default_model_dir() { return resource_dir() / "models" / "demo-shapes"; }

}  // namespace qvl
