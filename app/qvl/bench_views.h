#pragma once
// qvl bench --views: decode with qvl-studio's two Vulkan views open (ui/render/offscreen_views.h: the pool map and
// the attention over the picture, fed and drawn as the app's windows are) against closed, interleaved, and the
// frames' draw times. A build without Vulkan's headers has the option and says why it cannot run.
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "runtime/engine.h"

namespace qvl::cli {

struct ViewsBenchOptions {
  int64_t repeat = 3;                                // timed answers each way, after one warm-up each
  int64_t layer = 0;                                 // the attention view's layer (mean of the heads)
  std::optional<std::filesystem::path> snapshot_dir;  // where the last frame of each view is written (PPM)
};

// Runs `request` (ignore_eos, a fixed number of tokens; a picture in it) closed and open in turn after a warm-up of
// each; the JSON holds both rates, their ratio, where the frames came from and each view's counts and draw times over
// the timed open answers. Throws qvl::Error for a layer out of range, a prompt without a picture, or no Vulkan.
nlohmann::json time_views(Engine& engine, const GenerateRequest& request, const ViewsBenchOptions& options);

}  // namespace qvl::cli
