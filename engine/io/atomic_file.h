#pragma once
#include <filesystem>
#include <string_view>

namespace qvl {

// Writes `contents` to a temporary sibling, flushes it to disk and renames it over `path`: readers see the old
// file or the new one, never half of one.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace qvl
