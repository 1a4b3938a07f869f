#include "qvl/bench_views.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "io/model_folder.h"
#include "render/offscreen_views.h"

namespace qvl::cli {

namespace {

// The app's feed during an answer (ui/engine_worker.cpp's sink): the pool looked at with the live numbers, at most
// every kLiveViewInterval (a frame only when it changed), and each decode step's heat (the channel keeps one in 15 ms).
// The heatmap's picture: a dock's worth of pixels (the window fits it to its own size, at most kMaxPictureSide).
constexpr uint32_t kPictureSide = 448;
class ViewsSink final : public TokenSink {
public:
  ViewsSink(Engine& engine, render::ViewsFeed& feed) : engine_(engine), feed_(feed) {}
  void on_token(int32_t id, const std::string&) override {
    if (id < 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < kLiveViewInterval) return;
    last_ = now;
    feed_.publish_pool(engine_, false);
  }
  void on_attention(const AttentionFrame& frame) override { feed_.publish_attention(engine_, frame); }

private:
  Engine& engine_;
  render::ViewsFeed& feed_;
  std::chrono::steady_clock::time_point last_{};
};

nlohmann::json stats_json(const render::OffscreenViewStats& s) {
  return {{"frames_published", s.published}, {"frames_dropped", s.dropped}, {"frames_skipped", s.skipped},
          {"frames_drawn", s.drawn}, {"frames_drawn_from_cuda_memory", s.drawn_from_cuda_memory},
          {"draw_ms_median", median(s.draw_ms)}, {"draw_ms_p99", percentile(s.draw_ms, 0.99)}};
}

}  // namespace

nlohmann::json time_views(Engine& engine, const GenerateRequest& request, const ViewsBenchOptions& options) {
  // Checked before a device is made: a layer out of range would turn the tap off and measure nothing.
  const int64_t layers = engine.model().config.text.num_hidden_layers;
  if (options.layer < 0 || options.layer >= layers)
    fail("qvl bench: --views-layer ", options.layer, " is not a layer of the model (0 to ", layers - 1, ")");
  if (request.images.empty())
    fail("qvl bench --views: the attention view needs a picture in the prompt (--image or --image-size)");
  const auto identity = engine.device_identity();
  render::OffscreenViews views(identity ? std::optional(identity->uuid) : std::nullopt,
                              "the model runs on the CPU", {640, 200, render::kPoolBarHeight});
  const render::FittedPicture picture = render::fit_picture(*request.images.back().pixels(), kPictureSide);
  views.set_picture(picture.rgba, picture.width, picture.height);

  // Closed: no tap, no frames, no viewer. Open: the tap recorded into the step, the feed, the viewer drawing.
  auto answer = [&](bool open) {
    engine.set_attention_view({open ? options.layer : -1, -1});
    ViewsSink sink(engine, views.feed());
    if (open) {
      views.start();
      views.feed().publish_pool(engine, true);  // as a window asks for its first frame
    }
    const GenerateResult result = engine.generate(request, open ? &sink : nullptr);
    if (open) views.stop();
    return double(result.timing.decode_steps) / result.timing.decode_ms * 1e3;
  };
  answer(false);  // warm-ups: the tap's recording, the imports, the viewer's first frames (not counted)
  answer(true);
  views.reset_stats();
  std::vector<double> closed, open;
  for (int64_t r = 0; r < options.repeat; ++r) {  // interleaved: drift in the machine's speed falls on both alike
    closed.push_back(answer(false));
    open.push_back(answer(true));
  }
  engine.set_attention_view({-1, -1});

  const render::OffscreenViewStats pool = views.pool_stats(), heat = views.heat_stats();
  nlohmann::json out = {
      {"vulkan_device", views.device_name()},
      {"from_cuda_memory", views.interop_reason().empty()},
      {"host_upload_reason", views.interop_reason()},
      {"attention_layer", options.layer},
      {"closed_decode_tokens_per_s", median(closed)},
      {"open_decode_tokens_per_s", median(open)},
      {"open_over_closed", median(open) / median(closed)},
      {"repeats", options.repeat},
      {"pool_map", stats_json(pool)},
      {"attention", stats_json(heat)},
  };
  // $QVL_VULKAN_VALIDATION=1: what the layers said (the tests ask for none).
  if (const auto messages = views.validation_messages()) out["validation_messages"] = *messages;
  if (options.snapshot_dir) {
    std::filesystem::create_directories(*options.snapshot_dir);
    nlohmann::json written = nlohmann::json::array();
    for (const auto& [name, shot] : {std::pair{"pool-map.ppm", views.pool_snapshot()}, {"attention.ppm", views.heat_snapshot()}}) {
      if (shot.rgba.empty()) continue;
      const auto path = *options.snapshot_dir / name;
      render::write_ppm(path, shot.rgba, shot.width, shot.height);
      written.push_back(path.string());
    }
    out["snapshots"] = written;
  }
  return out;
}

}  // namespace qvl::cli
