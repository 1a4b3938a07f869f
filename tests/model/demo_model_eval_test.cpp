// The trained demo model (resources/models/demo-shapes) against transformers on its held-out evaluation set
// (tools/demo-model/make_eval_goldens.py: 240 questions on 80 pictures training never drew, transformers' greedy
// answers in fp32). Every item runs through the engine, greedy; the answers must equal transformers' on at least
// 98% of the items, and the exact-match accuracy must be within one point of transformers'. A trained model
// answers the same only if preprocessing, position ids, DeepStack and the decoder all match. CPU always; CUDA
// when a GPU is usable (otherwise the test says it was skipped and why).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/cuda_plugin.h"
#include "io/json_fields.h"
#include "runtime/engine.h"
#include "test_support.h"
#include "vision/image.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;
const fs::path kEvalDir = fs::path(QVL_TEST_GOLDEN_DIR) / "demo-eval";

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \n\t"), last = s.find_last_not_of(" \n\t");
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

// The item as the reference asked it: the picture with the first user turn, then the history, then the question.
GenerateRequest request_for(const nlohmann::json& item) {
  GenerateRequest r;
  std::vector<std::pair<std::string, std::string>> turns;
  for (const auto& t : item["history"]) turns.emplace_back(t["role"], t["content"]);
  turns.emplace_back("user", item["question"]);
  for (std::size_t k = 0; k < turns.size(); ++k) {
    ChatMessage m = ChatMessage::text(turns[k].first, turns[k].second);
    if (k == 0) m.content.insert(m.content.begin(), ContentItem::image());
    r.messages.push_back(std::move(m));
  }
  r.images = {load_image(kEvalDir / item["image"].get<std::string>())};
  r.max_new_tokens = item.value("max_new_tokens", 48);
  return r;
}

constexpr double kQ4Agreement = 0.98;  // measured 100% (240/240) on the CPU, 2026-11-23

struct Score {
  int items = 0, same_as_reference = 0, right = 0, reference_right = 0;
  std::map<std::string, std::pair<int, int>> by_kind;  // right, total
};

#ifdef QVL_SANITIZED_BUILD
constexpr std::size_t kItemStride = 8;  // sanitizers look for memory errors: every 8th item (30) is plenty, in minutes
constexpr std::size_t kQuantisedItemStride = 24;  // the same code with other weights: 10 items (2 min each at 8)
#else
constexpr std::size_t kItemStride = 1, kQuantisedItemStride = 1;
#endif

// weights: bf16 (as stored), or quantised at load: then the answers are held to `min_agreement` with transformers'
// (fp32) ones instead of 98%, and the accuracy is reported, not required.
void evaluate_on(const std::string& device, const std::string& weights = "bf16", double min_agreement = 0.98) {
  const auto golden = read_json_file(kEvalDir / "items.json");
  EngineOptions options{device};
  options.weights = weights;
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-shapes", options);
  ASSERT_EQ(engine->device(), device);
  Score s;
  int shown = 0;
  const std::size_t stride = weights == "bf16" ? kItemStride : kQuantisedItemStride;
  for (std::size_t i = 0; i < golden["items"].size(); i += stride) {
    auto item = golden["items"][i];
    item["max_new_tokens"] = golden["max_new_tokens"];
    const std::string answer = trimmed(engine->generate(request_for(item)).text);
    const std::string truth = item["truth"], reference = item["transformers"];
    ++s.items;
    s.same_as_reference += answer == reference;
    s.right += answer == truth;
    s.reference_right += reference == truth;
    auto& kind = s.by_kind[item["kind"]];
    kind.first += answer == truth;
    ++kind.second;
    if (answer != reference && shown++ < 10)
      std::printf("  differs from transformers: %s | %s | qvl: %s | transformers: %s\n",
                  item["image"].get<std::string>().c_str(), item["question"].get<std::string>().c_str(),
                  answer.c_str(), reference.c_str());
  }
  const double agreement = double(s.same_as_reference) / s.items, accuracy = double(s.right) / s.items,
               reference_accuracy = double(s.reference_right) / s.items;
  std::printf("demo model on %s, %s weights: %d items, same answer as transformers %.2f%%, accuracy %.2f%% "
              "(transformers %.2f%%)\n",
              device.c_str(), weights.c_str(), s.items, 100 * agreement, 100 * accuracy, 100 * reference_accuracy);
  for (const auto& [kind, rt] : s.by_kind) std::printf("  %-9s %d/%d\n", kind.c_str(), rt.first, rt.second);
  if (stride == 1) {
    EXPECT_GE(s.items, 200);
    EXPECT_NEAR(reference_accuracy, golden["transformers_accuracy"].get<double>(), 1e-9);  // the file is consistent
  } else {
    std::printf("sanitizer build: every %zu-th item only\n", stride);
  }
  EXPECT_GE(agreement, min_agreement);
  if (weights == "bf16") {
    EXPECT_LE(std::fabs(accuracy - reference_accuracy), 0.01);
  }
}

TEST(DemoModel, AnswersTheHeldOutQuestionsAsTransformersDoesOnTheCpu) { evaluate_on("cpu"); }

TEST(DemoModel, AnswersTheHeldOutQuestionsAsTransformersDoesOnTheGpu) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  evaluate_on("cuda");
}

// Quantised at load: q8 answers as the unquantised model does on at least 98% of the items (the bar); q4 is
// measured (docs/quantization.md records it) and held to what it measured when this test was written, less a margin.
// q8 is in groups of 128; q8-g32 (llama.cpp's Q8_0 grouping) is held to the same bar.
TEST(DemoModel, AnswersTheHeldOutQuestionsWithQ8WeightsOnTheCpu) { evaluate_on("cpu", "q8", 0.98); }
TEST(DemoModel, AnswersTheHeldOutQuestionsWithQ8G32WeightsOnTheCpu) { evaluate_on("cpu", "q8-g32", 0.98); }
TEST(DemoModel, AnswersTheHeldOutQuestionsWithQ4WeightsOnTheCpu) { evaluate_on("cpu", "q4", kQ4Agreement); }
TEST(DemoModel, AnswersTheHeldOutQuestionsWithQuantisedWeightsOnTheGpu) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  evaluate_on("cuda", "q8", 0.98);
  evaluate_on("cuda", "q8-g32", 0.98);
  evaluate_on("cuda", "q4", kQ4Agreement);
}

// The pictures the app ships: the README's demo asks the first one; the answer is transformers' answer.
TEST(DemoModel, AnswersTheBundledPicturesAsTransformersDoes) {
  const auto samples = read_json_file(test::resource_dir() / "samples" / "answers.json");
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-shapes", {"cpu"});
  ASSERT_GE(samples.size(), 1u);
  for (const auto& s : samples) {
    GenerateRequest r;
    ChatMessage m = ChatMessage::text("user", s["question"]);
    m.content.insert(m.content.begin(), ContentItem::image());
    r.messages = {m};
    r.images = {load_image(test::resource_dir() / "samples" / s["image"].get<std::string>())};
    r.max_new_tokens = 48;
    EXPECT_EQ(trimmed(engine->generate(r).text), s["transformers"].get<std::string>()) << s["image"];
  }
}

}  // namespace
}  // namespace qvl
