#pragma once
// Shared by the libFuzzer targets. Each target feeds its input to one reader and lets only qvl::Error pass: any other
// exception (a raw nlohmann or filesystem error, std::bad_alloc), a crash, a sanitizer report, a hang or a blown
// memory limit is a finding. Readers that take a path get the input written to a per-process file first.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"

namespace qvl::fuzz {

inline std::string_view as_text(const uint8_t* data, std::size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// A scratch folder of this process (removed by tools/fuzz afterwards), created once.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("qvl-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::filesystem::path write_scratch(const std::string& name, std::string_view bytes) {
  const auto path = scratch() / name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

// Runs `work`; a qvl::Error is the expected outcome for bad input.
template <class F>
void expect_clean(F&& work) {
  try {
    work();
  } catch (const Error&) {
  }
}

}  // namespace qvl::fuzz
