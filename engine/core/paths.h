#pragma once
#include <filesystem>

namespace qvl {

// Where the read-only resources live (tokenizer, demo model, sample images): $QVL_RESOURCE_DIR, else
// <executable>/../share/qvl when installed, else the build tree's resources folder.
std::filesystem::path resource_dir();
// The embedded demo model folder inside resource_dir().
std::filesystem::path default_model_dir();

}  // namespace qvl
