// The attention view on the demo model (CPU): the tap's heat over the picture follows the shape the answer names.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "backend/cuda_plugin.h"
#include "runtime/attention_tapper.h"
#include "runtime/engine.h"
#include "test_support.h"
#include "vision/image.h"

namespace qvl {
namespace {

struct HeatFrames : TokenSink {
  std::vector<std::string> pieces;  // by step
  std::vector<std::vector<float>> heat;
  std::vector<int64_t> layers;
  int64_t grid_h = 0, grid_w = 0;
  std::function<void(int64_t step)> after;  // called after each frame (to change the view mid-answer)
  void on_token(int32_t id, const std::string& text) override {
    if (id >= 0) pieces.push_back(text);
  }
  void on_attention(const AttentionFrame& f) override {
    const Tensor host = f.backend->to_host(*f.heat);
    heat.resize(std::size_t(f.step) + 1);
    heat[std::size_t(f.step)].assign(host.data<float>(), host.data<float>() + host.numel());
    layers.resize(heat.size());
    layers[std::size_t(f.step)] = f.layer;
    grid_h = f.grid_h;
    grid_w = f.grid_w;
    if (after) after(f.step);
  }
};

// The share of each merged cell covered by pixels near `rgb` (the picture's flat colours).
std::vector<double> colour_cells(const RgbImage& image, std::array<int, 3> rgb, int64_t grid_h, int64_t grid_w) {
  std::vector<double> cells(std::size_t(grid_h * grid_w), 0.0);
  for (int64_t y = 0; y < image.height; ++y)
    for (int64_t x = 0; x < image.width; ++x) {
      int distance = 0;
      for (int c = 0; c < 3; ++c) distance += std::abs(int(image.at(y, x, c)) - rgb[std::size_t(c)]);
      if (distance < 60) cells[std::size_t((y * grid_h / image.height) * grid_w + x * grid_w / image.width)] += 1.0;
    }
  const double per_cell = double(image.height * image.width) / double(grid_h * grid_w);
  for (double& c : cells) c /= per_cell;
  return cells;
}

double heat_on(const std::vector<float>& heat, const std::vector<double>& cells) {
  double on = 0, all = 0;
  for (std::size_t i = 0; i < heat.size(); ++i) {
    on += heat[i] * cells[i];
    all += heat[i];
  }
  return all > 0 ? on / all : 0;
}

TEST(AttentionView, LatestImageTokensFindTheLastRunAndItsGrid) {
  const std::vector<int32_t> ids{1, 9, 9, 9, 9, 2, 3, 9, 9, 9, 9, 9, 9, 4};
  const auto t = latest_image_tokens(ids, 9, {{1, 4, 4}, {1, 4, 6}}, 2);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->first, 7);
  EXPECT_EQ(t->count, 6);
  EXPECT_EQ(t->grid_h, 2);
  EXPECT_EQ(t->grid_w, 3);
  EXPECT_EQ(t->image, 1);
  EXPECT_FALSE(latest_image_tokens(ids, 9, {{1, 4, 4}, {1, 4, 4}}, 2));  // 6 tokens cannot be a 2x2 grid
  EXPECT_FALSE(latest_image_tokens(std::vector<int32_t>{1, 2, 3}, 9, {}, 2));
}

TEST(AttentionView, TheHeatFollowsTheShapeTheAnswerNames) {
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-shapes", {"cpu"});
  const auto picture = test::resource_dir() / "samples" / "scene-2.png";  // an orange circle top right, a green triangle left
  const RgbImage image = load_image(picture);
  GenerateRequest request;
  request.messages = {{"user", {ContentItem::image(), ContentItem::make_text("What shapes do you see?")}}};
  request.images = {ImageInput::file(picture)};
  request.max_new_tokens = 24;
  // Layer 0, the mean of its heads: where the demo model's first layer looks from each word of its answer. (Measured
  // over all six layers: the nouns look at their shapes most clearly here.)
  engine->set_attention_view({0, -1});
  HeatFrames frames;
  const GenerateResult result = engine->generate(request, &frames);
  ASSERT_EQ(result.text, "An orange circle at the top right and a green triangle on the left.");
  ASSERT_EQ(frames.heat.size(), frames.pieces.size() - 1);  // every step but the last (its forward never runs)
  const auto orange = colour_cells(image, {240, 140, 40}, frames.grid_h, frames.grid_w);
  const auto green = colour_cells(image, {60, 170, 70}, frames.grid_h, frames.grid_w);
  const std::vector<float> uniform(orange.size(), 1.0f);  // what a view that looks everywhere alike would give
  auto step_of = [&](const std::string& word) {
    return std::size_t(std::find(frames.pieces.begin(), frames.pieces.end(), word) - frames.pieces.begin());
  };
  const std::size_t circle = step_of(" circle"), triangle = step_of(" triangle");
  ASSERT_LT(triangle, frames.heat.size());
  const double circle_on_orange = heat_on(frames.heat[circle], orange), circle_on_green = heat_on(frames.heat[circle], green);
  const double triangle_on_green = heat_on(frames.heat[triangle], green),
               triangle_on_orange = heat_on(frames.heat[triangle], orange);
  std::printf("[attention view] 'circle': %.3f of its heat on the orange circle (%.3f if uniform), %.3f on the green "
              "triangle; 'triangle': %.3f on the triangle (%.3f if uniform), %.3f on the circle\n",
              circle_on_orange, heat_on(uniform, orange), circle_on_green, triangle_on_green, heat_on(uniform, green),
              triangle_on_orange);
  EXPECT_GT(circle_on_orange, 3 * heat_on(uniform, orange));
  EXPECT_GT(circle_on_orange, 5 * circle_on_green);
  EXPECT_GT(triangle_on_green, 3 * heat_on(uniform, green));
  EXPECT_GT(triangle_on_green, 5 * triangle_on_orange);
  // Off again: no frames, and the same answer.
  engine->set_attention_view({-1, -1});
  HeatFrames none;
  EXPECT_EQ(engine->generate(request, &none).text, result.text);
  EXPECT_TRUE(none.heat.empty());
}

// The CUDA tap runs inside the recorded decode step (a CUDA graph); a view changed mid-answer records the step again.
// Its heat is the CPU's within a few levels (the GPU's prefill rounds activations to bf16 where the CPU keeps f32).
TEST(AttentionView, TheGpuTapInRecordedStepsFollowsAViewChangedMidAnswer) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  const auto picture = test::resource_dir() / "samples" / "scene-2.png";
  GenerateRequest request;
  request.messages = {{"user", {ContentItem::image(), ContentItem::make_text("What shapes do you see?")}}};
  request.images = {ImageInput::file(picture)};
  request.max_new_tokens = 24;
  auto answer = [&](const std::string& device) {
    const auto engine = Engine::load(test::resource_dir() / "models" / "demo-shapes", {device});
    engine->set_attention_view({0, -1});
    HeatFrames frames;
    frames.after = [&](int64_t step) {
      if (step == 5) engine->set_attention_view({2, 1});
    };
    EXPECT_EQ(engine->generate(request, &frames).text, "An orange circle at the top right and a green triangle on the left.");
    return frames;
  };
  const HeatFrames cpu = answer("cpu"), gpu = answer("cuda");
  ASSERT_EQ(gpu.heat.size(), cpu.heat.size());
  double worst_mean = 0;
  for (std::size_t step = 0; step < gpu.heat.size(); ++step) {
    EXPECT_EQ(gpu.layers[step], step <= 5 ? 0 : 2) << "step " << step;
    double sum = 0;
    for (std::size_t i = 0; i < gpu.heat[step].size(); ++i) sum += std::abs(gpu.heat[step][i] - cpu.heat[step][i]);
    worst_mean = std::max(worst_mean, sum / double(gpu.heat[step].size()));
  }
  std::printf("[attention view] GPU against CPU: worst step's mean difference %.2f levels of 255\n", worst_mean);
  EXPECT_LT(worst_mean, 4.0);
}

}  // namespace
}  // namespace qvl
