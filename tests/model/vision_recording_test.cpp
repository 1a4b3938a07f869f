// The vision tower recorded for a set of image grids and replayed (model/recorded_vision_tower.h): a replay gives
// what the tower op by op gives for the pixels it is handed (not the pixels it was recorded with), its features are
// the caller's to keep, and what is recorded follows the grids a pass left, the byte limit and what the backend can
// record; in the engine, a picture size seen before is replayed and answered as the first time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "backend/cuda_plugin.h"
#include "backend/registry.h"
#include "model/recorded_vision_tower.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "test_support.h"

namespace qvl {
namespace {

// Two pictures in one batch (two attention segments), in patches before the 2x2 merge.
const std::vector<ImageGrid> kTwoPictures{{1, 8, 12}, {1, 4, 4}};

Tensor random_pixels(const ModelConfig& config, const std::vector<ImageGrid>& grids, unsigned seed) {
  int64_t patches = 0;
  for (const ImageGrid& g : grids) patches += g.t * g.h * g.w;
  Tensor t = Tensor::empty(DType::F32, {patches, config.vision.patch_dim()});
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

// The largest relative difference over the embeddings and every DeepStack block.
double difference(Backend& be, const VisionOutput& a, const VisionOutput& b) {
  double worst = test::relative_error(be.to_host(a.embeddings).to_f32_vector(), be.to_host(b.embeddings).to_f32_vector());
  EXPECT_EQ(a.deepstack.size(), b.deepstack.size());
  for (std::size_t i = 0; i < a.deepstack.size() && i < b.deepstack.size(); ++i)
    worst = std::max(worst, test::relative_error(be.to_host(a.deepstack[i]).to_f32_vector(),
                                                 be.to_host(b.deepstack[i]).to_f32_vector()));
  return worst;
}

class VisionRecording : public ::testing::Test {
protected:
  const ModelFolder model = ModelFolder::open(test::resource_dir() / "models" / "demo-tiny");
  static constexpr uint64_t kNoLimit = ~uint64_t(0);
};

class VisionRecordingOnTheGpu : public VisionRecording, public ::testing::WithParamInterface<std::string> {};

TEST_P(VisionRecordingOnTheGpu, AReplayGivesTheTowersResultForThePixelsItIsHanded) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  const auto gpu = make_cuda_backend(0, 0, GetParam());  // sm61: the Pascal path (f16 storage, no cuBLAS), forced
  const ModelWeights weights = bind_weights(model, *gpu);
  const Tensor a = gpu->from_host(random_pixels(model.config, kTwoPictures, 1)),
               b = gpu->from_host(random_pixels(model.config, kTwoPictures, 2));
  const auto op_by_op = [&](const Tensor& pixels, const std::vector<ImageGrid>& grids) {
    return encode_images(*gpu, model.config, weights.vision, pixels, grids);
  };
  const VisionOutput direct_a = op_by_op(a, kTwoPictures), direct_b = op_by_op(b, kTwoPictures);
  ASSERT_GT(difference(*gpu, direct_a, direct_b), 0.1);  // the pictures differ: a stale input would show

  RecordedVisionTower tower;
  const auto encode = [&](const Tensor& pixels, const std::vector<ImageGrid>& grids) {
    return tower.encode(*gpu, model.config, weights.vision, pixels, grids, nullptr);
  };
  const auto record = [&](uint64_t limit = kNoLimit) { return tower.record_pending(*gpu, model.config, weights.vision, limit); };
  // The same kernels replayed: the same sums, so the same bits are expected; the limit allows only for a product
  // choosing another kernel while it is captured.
  constexpr double kSame = 1e-6;
  EXPECT_FALSE(record());  // nothing ran op by op yet
  const VisionOutput first = encode(a, kTwoPictures);  // nothing recorded: op by op
  EXPECT_FALSE(tower.replayed_last());
  EXPECT_LE(difference(*gpu, first, direct_a), kSame);
  EXPECT_EQ(tower.held_bytes(), 0u);
  const auto began = std::chrono::steady_clock::now();
  ASSERT_TRUE(record());  // the grids that pass left
  const uint64_t held = tower.held_bytes();
  std::printf("[%s] recorded in %.2f ms, holding %.2f MiB\n", GetParam().c_str(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count(),
              double(held) / (1 << 20));
  EXPECT_GT(held, uint64_t(a.nbytes()));  // its input and the tower's buffers
  EXPECT_FALSE(record());  // left once: nothing more to record
  EXPECT_EQ(tower.held_bytes(), held);
  const VisionOutput second = encode(b, kTwoPictures);  // replayed with other pixels than any before
  EXPECT_TRUE(tower.replayed_last());
  const double replayed_error = difference(*gpu, second, direct_b);
  std::printf("replayed against op by op: %.3g (largest relative difference)\n", replayed_error);
  EXPECT_LE(replayed_error, kSame);
  const VisionOutput third = encode(a, kTwoPictures);  // replayed with a: the recording wrote its buffers again
  EXPECT_TRUE(tower.replayed_last());
  EXPECT_LE(difference(*gpu, third, direct_a), kSame);
  EXPECT_LE(difference(*gpu, second, direct_b), kSame) << "a replay's features are copies: the next one keeps them";

  // Other grids: op by op, the recording kept until they are recorded in its place.
  const std::vector<ImageGrid> one{{1, 8, 12}};
  const Tensor a_one = gpu->from_host(random_pixels(model.config, one, 3));
  EXPECT_LE(difference(*gpu, encode(a_one, one), op_by_op(a_one, one)), kSame);
  EXPECT_FALSE(tower.replayed_last());
  EXPECT_EQ(tower.held_bytes(), held);
  ASSERT_TRUE(record());
  EXPECT_LT(tower.held_bytes(), held);  // one picture's buffers
  const uint64_t one_held = tower.held_bytes();
  encode(a, kTwoPictures);  // the old grids: op by op now
  EXPECT_FALSE(tower.replayed_last());
  EXPECT_LE(difference(*gpu, encode(a_one, one), op_by_op(a_one, one)), kSame);
  EXPECT_TRUE(tower.replayed_last());
  // That replay took back what the pass before it left (as a request failing before its recording would leave it):
  // nothing is recorded in the held one's place.
  EXPECT_FALSE(record());
  EXPECT_EQ(tower.held_bytes(), one_held);
  // A recording over the limit is not held, nor tried again for grids of as many patches (it allocates nothing then).
  tower.forget();
  encode(a, kTwoPictures);
  EXPECT_FALSE(record(held / 2));
  EXPECT_EQ(tower.held_bytes(), 0u);
  encode(a, kTwoPictures);
  const int64_t allocations = gpu->memory_report(false).alloc_count;
  EXPECT_FALSE(record());
  EXPECT_EQ(gpu->memory_report(false).alloc_count, allocations);
  EXPECT_EQ(tower.held_bytes(), 0u);
  // A held recording over a smaller limit than it was made under is forgotten.
  encode(a_one, one);
  ASSERT_TRUE(record());
  EXPECT_EQ(tower.held_bytes(), one_held);
  encode(a_one, one);
  EXPECT_TRUE(tower.replayed_last());
  EXPECT_FALSE(record(one_held - 1));
  EXPECT_EQ(tower.held_bytes(), 0u);
  // forget() starts over; 0 as the limit records nothing.
  tower.forget();
  encode(a, kTwoPictures);
  EXPECT_FALSE(record(0));
  encode(a, kTwoPictures);
  EXPECT_TRUE(record());
  encode(a, kTwoPictures);
  EXPECT_TRUE(tower.replayed_last());
}

INSTANTIATE_TEST_SUITE_P(Profiles, VisionRecordingOnTheGpu, ::testing::Values("native", "sm61"));

// A backend that records nothing (the CPU) encodes op by op every time, and holds nothing.
TEST_F(VisionRecording, ABackendThatCannotRecordEncodesOpByOp) {
  const auto cpu = create_backend(BackendKind::Cpu);
  const ModelWeights weights = bind_weights(model, *cpu);
  const Tensor pixels = random_pixels(model.config, kTwoPictures, 4);
  const VisionOutput direct = encode_images(*cpu, model.config, weights.vision, pixels, kTwoPictures);
  RecordedVisionTower tower;
  for (int i = 0; i < 3; ++i) {
    const VisionOutput out = tower.encode(*cpu, model.config, weights.vision, pixels, kTwoPictures, nullptr);
    EXPECT_FALSE(tower.replayed_last());
    EXPECT_FALSE(tower.record_pending(*cpu, model.config, weights.vision, kNoLimit));
    EXPECT_EQ(tower.held_bytes(), 0u);
    EXPECT_EQ(difference(*cpu, out, direct), 0.0);
  }
}

// In the engine: the same picture asked about three times with no features kept (so the tower runs each time) is
// encoded op by op and recorded after that answer, then replayed twice; each answer is the first one's. CUDA graphs
// off: never recorded.
TEST(VisionRecordingInTheEngine, AReplayedTowerAnswersAsTheFirstTime) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  const auto run = [](bool graphs) {
    EngineOptions options{"cuda"};
    options.vision_cache_bytes = 0;
    options.cuda_graphs = graphs;
    const auto engine = Engine::load(test::resource_dir() / "models" / "demo-shapes", options);
    GenerateRequest request;
    request.messages = {{"user", {ContentItem::image(), ContentItem::make_text("What shapes do you see?")}}};
    request.images.push_back(ImageInput::file(test::resource_dir() / "samples" / "scene-1.png"));
    request.max_new_tokens = 6;
    request.keep_step_logits = true;
    std::vector<GenerateResult> results;
    for (int i = 0; i < 3; ++i) {
      results.push_back(engine->generate(request));
      EXPECT_EQ(engine->vision_cache().recorded_tower_bytes > 0, graphs) << "after request " << i;
    }
    return results;
  };
  const std::vector<GenerateResult> replayed = run(true), launched = run(false);
  EXPECT_FALSE(replayed[0].timing.vision_replayed);
  EXPECT_TRUE(replayed[1].timing.vision_replayed);
  EXPECT_TRUE(replayed[2].timing.vision_replayed);
  for (const GenerateResult& r : launched) EXPECT_FALSE(r.timing.vision_replayed);
  for (std::size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(replayed[i].generated_ids, replayed[0].generated_ids) << "request " << i;
    EXPECT_LE(test::relative_error(replayed[i].first_step_logits, replayed[0].first_step_logits), 1e-6) << "request " << i;
  }
  EXPECT_EQ(replayed[0].generated_ids, launched[0].generated_ids);
}

}  // namespace
}  // namespace qvl
