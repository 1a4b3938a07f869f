// The decoder cut into parts on separate backends (a memory plan's partial offload) computes what one backend does:
// the hidden state crosses between parts, DeepStack features reach the layers of either part, the output head runs
// on the last part alone, and a prompt run in chunks gives the whole prompt's logits. Two CPU backends stand in for
// the GPU and the CPU here (the GPU split is in tests/runtime/engine_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/registry.h"
#include "core/error.h"
#include "model/rope.h"
#include "model/text_decoder.h"
#include "model/weights.h"
#include "test_support.h"

namespace qvl {
namespace {

struct Split : ::testing::Test {
  ModelFolder model = ModelFolder::open(test::resource_dir() / "models" / "demo-tiny");
  const ModelConfig& config = model.config;
  std::unique_ptr<Backend> gpu_stand_in = create_backend(BackendKind::Cpu), host = create_backend(BackendKind::Cpu);
  std::vector<int32_t> prompt;
  VisionInjection vision;

  void SetUp() override {
    // Twenty tokens with five image placeholders among them, and made-up image features for those.
    for (int32_t i = 0; i < 20; ++i) prompt.push_back(i >= 6 && i < 11 ? int32_t(config.image_token_id) : 100 + 37 * i);
    for (int64_t i = 6; i < 11; ++i) vision.positions.push_back(i);
    const int64_t hidden = config.text.hidden_size;
    vision.embeddings = gpu_stand_in->from_host(test::random_normal({5, hidden}, 1));
    for (std::size_t d = 0; d < config.vision.deepstack_visual_indexes.size(); ++d)
      vision.deepstack.push_back(gpu_stand_in->from_host(test::random_normal({5, hidden}, uint32_t(2 + d))));
    vision.backend = gpu_stand_in.get();
  }

  // Prefill (in chunks of `chunk` tokens) and three decode steps: the logits of every step.
  std::vector<std::vector<float>> run(const std::vector<DecoderPart>& parts, const TextWeights& weights, int64_t chunk) {
    KvCache cache(parts, config.text, 32);
    TextDecoder decoder(parts, config, weights);
    std::array<std::vector<int64_t>, 3> axes;
    for (int64_t p = 0; p < 24; ++p)
      for (auto& a : axes) a.push_back(p);
    std::vector<std::vector<float>> out;
    Tensor logits;
    for (int64_t begin = 0; begin < int64_t(prompt.size()); begin += chunk) {
      const int64_t end = std::min<int64_t>(int64_t(prompt.size()), begin + chunk);
      const auto [cos, sin] = text_rope_tables(config.text, axes, std::size_t(begin), std::size_t(end - begin));
      const VisionInjection share = vision.rows(begin, end);
      logits = decoder.forward(std::span(prompt).subspan(std::size_t(begin), std::size_t(end - begin)), cos, sin,
                               share.positions.empty() ? nullptr : &share, cache);
    }
    out.push_back(logits.to_f32_vector());
    for (int32_t id : {7, 4242, 99}) {
      const auto [cos, sin] = text_rope_tables(config.text, axes, std::size_t(cache.length()), 1);
      out.push_back(decoder.forward(std::span(&id, 1), cos, sin, nullptr, cache).to_f32_vector());
    }
    return out;
  }
  WeightPlacement split_at(int64_t k) {
    WeightPlacement p = WeightPlacement::all_on(*gpu_stand_in, config);
    p.head = host.get();
    for (int64_t l = k; l < config.text.num_hidden_layers; ++l) p.layers[std::size_t(l)] = host.get();
    return p;
  }
};

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST_F(Split, PartsOnTwoBackendsComputeWhatOneDoes) {
  const int64_t layers = config.text.num_hidden_layers;
  const ModelWeights whole = bind_weights(model, *gpu_stand_in);
  const auto reference = run({DecoderPart{gpu_stand_in.get(), 0, layers}}, whole.text, 64);
  for (int64_t k : {int64_t(1), layers / 2, layers}) {  // DeepStack layers on both sides; the head alone at the end
    const ModelWeights weights = bind_weights(model, split_at(k));
    EXPECT_EQ(weights.text.layers.back().q.weight.device(), Device::CPU);
    const auto split = run({{gpu_stand_in.get(), 0, k}, {host.get(), k, layers}}, weights.text, 64);
    ASSERT_EQ(split.size(), reference.size());
    for (std::size_t step = 0; step < split.size(); ++step)
      EXPECT_LT(relative_difference(split[step], reference[step]), 1e-6) << "split at " << k << ", step " << step;
  }
}

TEST_F(Split, APromptInChunksGivesTheWholePromptsLogits) {
  const int64_t layers = config.text.num_hidden_layers;
  const ModelWeights weights = bind_weights(model, split_at(2));
  const std::vector<DecoderPart> parts{{gpu_stand_in.get(), 0, 2}, {host.get(), 2, layers}};
  const auto whole = run(parts, weights.text, 64);
  // Chunks of 7 cut the image's rows between two chunks; chunks of 1 take the recorded-step path for every token.
  for (int64_t chunk : {7, 1}) {
    const auto chunked = run(parts, weights.text, chunk);
    for (std::size_t step = 0; step < whole.size(); ++step)
      EXPECT_LT(relative_difference(chunked[step], whole[step]), 1e-5) << "chunks of " << chunk << ", step " << step;
  }
}

// With a step pick on, the decode steps of a split decoder hand back from the head's part what the same steps' logits
// give: greedy's {index, NaN seen} (the first index of the largest), or top-k's candidates (core/top_k.h over those
// logits); where the candidates do not fit (a temperature so high that every value rounds to 0: all tie), the logits
// themselves. The prefill still gives logits.
TEST_F(Split, StepPicksComeFromTheHeadsPartAsTheLogitsGive) {
  const int64_t layers = config.text.num_hidden_layers;
  const ModelWeights weights = bind_weights(model, split_at(2));
  const std::vector<DecoderPart> parts{{gpu_stand_in.get(), 0, 2}, {host.get(), 2, layers}};
  const auto logits = run(parts, weights.text, 64);
  const int64_t vocabulary = weights.text.lm_head.rows() - 3;  // the last rows are not candidates
  std::array<std::vector<int64_t>, 3> axes;
  for (int64_t p = 0; p < 24; ++p)
    for (auto& a : axes) a.push_back(p);
  const auto [cos, sin] = text_rope_tables(config.text, axes, 0, prompt.size());
  using StepPick = TextDecoder::StepPick;
  for (const StepPick& pick : {StepPick{vocabulary}, StepPick{vocabulary, 20, 0.7}, StepPick{vocabulary, 20, 1e300}}) {
    SCOPED_TRACE("top-k " + std::to_string(pick.top_k) + ", temperature " + std::to_string(pick.temperature));
    KvCache cache(parts, config.text, 32);
    TextDecoder decoder(parts, config, weights.text);
    decoder.set_step_pick(pick);
    const Tensor prefill = decoder.forward(prompt, cos, sin, &vision, cache);
    EXPECT_EQ(prefill.to_f32_vector(), logits[0]);
    std::size_t step = 1;
    for (int32_t id : {7, 4242, 99}) {
      const auto [c, s] = text_rope_tables(config.text, axes, std::size_t(cache.length()), 1);
      const Tensor got = decoder.forward(std::span(&id, 1), c, s, nullptr, cache, TextDecoder::Returns::Pick);
      const std::vector<float>& expected = logits[step++];
      if (pick.temperature > 1e100) {  // every candidate ties: more than fit
        ASSERT_EQ(got.dtype(), DType::F32);
        EXPECT_EQ(got.to_f32_vector(), expected);
      } else if (pick.top_k > 0) {
        ASSERT_EQ(got.dtype(), DType::I64);
        const TopKResult found = TextDecoder::candidates(got);
        ASSERT_TRUE(found.fitted);
        EXPECT_FALSE(found.nan);
        std::vector<float> row(expected.begin(), expected.begin() + vocabulary);
        std::vector<float> heap;
        std::vector<TopKCandidate> kept;
        temperature_top_k(row, pick.temperature, pick.top_k, heap, [&](float v, int32_t i) { kept.push_back({v, i}); });
        EXPECT_EQ(found.candidates, kept) << "step " << step - 1;
      } else {
        ASSERT_EQ(got.dtype(), DType::I64);
        ASSERT_EQ(got.numel(), 2);
        const auto largest = std::max_element(expected.begin(), expected.begin() + vocabulary) - expected.begin();
        EXPECT_EQ(got.data<int64_t>()[0], largest) << "step " << step - 1;
        EXPECT_EQ(got.data<int64_t>()[1], 0);
      }
    }
  }
}

TEST_F(Split, PartsMustCoverTheLayersInOrder) {
  const ModelWeights weights = bind_weights(model, *gpu_stand_in);
  const int64_t layers = config.text.num_hidden_layers;
  EXPECT_THROW(TextDecoder({{gpu_stand_in.get(), 0, 1}, {host.get(), 2, layers}}, config, weights.text), Error);
  EXPECT_THROW(TextDecoder({{gpu_stand_in.get(), 0, 1}}, config, weights.text), Error);
  EXPECT_THROW(TextDecoder({{nullptr, 0, layers}}, config, weights.text), Error);
  // A cache made for other parts is refused rather than read at the wrong layers.
  TextDecoder two({{gpu_stand_in.get(), 0, 1}, {host.get(), 1, layers}}, config, weights.text);
  KvCache one_part(*gpu_stand_in, config.text, 8);
  const auto [cos, sin] = text_rope_tables(config.text, {{{0}, {0}, {0}}}, 0, 1);
  const int32_t id = 5;
  EXPECT_THROW(two.forward(std::span(&id, 1), cos, sin, nullptr, one_part), Error);
  // As many parts but split elsewhere (the review's case: only the count was compared).
  KvCache split_at_two({{gpu_stand_in.get(), 0, 2}, {host.get(), 2, layers}}, config.text, 8);
  EXPECT_THROW(two.forward(std::span(&id, 1), cos, sin, nullptr, split_at_two), Error);
}

}  // namespace
}  // namespace qvl
