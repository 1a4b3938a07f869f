// `qvl generate --json` end to end, as a user runs it: a --messages file with images, compared with the
// transformers golden of the same conversation (prompt ids, grids, greedy tokens while the margin is clear).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;

std::pair<int, std::string> run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, ""};
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class GenerateCli : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateCli, JsonOutputMatchesTheTransformersGolden) {
  const fs::path golden_dir = fs::path(QVL_TEST_GOLDEN_DIR) / "model";
  const auto golden = nlohmann::json::parse(test::read_bytes(golden_dir / (GetParam() + ".json")));
  test::TempDir dir;
  // The messages file lives elsewhere: make the image paths absolute.
  auto messages = golden["messages"];
  for (auto& m : messages)
    if (m["content"].is_array())
      for (auto& item : m["content"])
        if (item.contains("image")) item["image"] = fs::weakly_canonical(golden_dir / item["image"].get<std::string>()).string();
  test::write_bytes(dir / "messages.json", messages.dump());
  const auto [rc, out] = run(std::string(QVL_TEST_QVL_BINARY) + " generate --model " + QVL_TEST_GOLDEN_MODEL_DIR +
                             "/" + golden["model"].get<std::string>() + " --messages " + (dir / "messages.json").string() +
                             " --temperature 0 --max-new-tokens 10 --device cpu --kv-cache f32 --json");
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["prompt_token_ids"], golden["prompt_token_ids"]);
  EXPECT_EQ(j["image_grid_thw"], golden["image_grid_thw"]);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_TRUE(j["fallback_reason"].is_null());  // --device cpu was asked for: nothing fell back
  const auto want = golden["greedy_token_ids"].get<std::vector<int>>();
  const auto margins = golden["greedy_margins"].get<std::vector<double>>();
  const auto got = j["generated_token_ids"].get<std::vector<int>>();
  for (std::size_t i = 0; i < want.size() && margins[i] > 0.01; ++i) EXPECT_EQ(got.at(i), want[i]) << "token " << i;
  ASSERT_EQ(j["first_step_top"].size(), 20u);
  // Our resize differs from torchvision's by one 8-bit step in ~0.5% of pixels (tests/model), which moves these
  // logits by ~1e-4 of their scale; from the reference pixels they agree to ~1e-6 (ModelGolden). The f32 KV cache
  // asked for above keeps them so; the bf16 one a bf16 checkpoint gets by default moves them ~1e-3 of their scale
  // (ModelGolden holds it to its own limit).
  const auto& ref_top = golden["first_step_top"];
  for (std::size_t i = 0; i < 5; ++i) {
    const bool separated = (i == 0 || ref_top[i - 1][1].get<double>() - ref_top[i][1].get<double>() > 0.01) &&
                           ref_top[i][1].get<double>() - ref_top[i + 1][1].get<double>() > 0.01;
    if (separated) {
      EXPECT_EQ(j["first_step_top"][i][0], ref_top[i][0]) << "rank " << i;
    }
    EXPECT_NEAR(j["first_step_top"][i][1].get<double>(), ref_top[i][1].get<double>(), 1e-2);
  }
  for (const char* key : {"preprocess_ms", "vision_ms", "prefill_ms", "decode_ms"}) EXPECT_GE(j["timing"][key].get<double>(), 0.0);
}

// The float goldens: the quantised ones (their "weights") are held to their own limits in tests/model, and the CLI's
// quantised paths have tests of their own (cli.generate_q4, cli.quantize_*).
std::vector<std::string> golden_cases() {
  const fs::path dir = fs::path(QVL_TEST_GOLDEN_DIR) / "model";
  std::vector<std::string> cases;
  const auto recipes = nlohmann::json::parse(test::read_bytes(dir / "recipes.json"));
  for (const std::string c : recipes["cases"])
    if (!nlohmann::json::parse(test::read_bytes(dir / (c + ".json"))).contains("weights")) cases.push_back(c);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Golden, GenerateCli, ::testing::ValuesIn(golden_cases()), [](const auto& param_info) {
  std::string n = param_info.param;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

TEST(GenerateCliErrors, ReportsBadImagesAndPromptsClearly) {
  test::TempDir dir;
  test::write_bytes(dir / "broken.png", "\x89PNG\r\n\x1a\n garbage");
  auto [rc, out] = run(std::string(QVL_TEST_QVL_BINARY) + " generate --device cpu --prompt hi --image " + (dir / "broken.png").string());
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("broken.png"), std::string::npos) << out;
  std::tie(rc, out) = run(std::string(QVL_TEST_QVL_BINARY) + " generate --device cpu --prompt hi --image " + (dir / "absent.jpg").string());
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("absent.jpg: cannot open"), std::string::npos) << out;
  std::tie(rc, out) = run(std::string(QVL_TEST_QVL_BINARY) + " generate --device cpu");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--prompt"), std::string::npos) << out;
}

}  // namespace
}  // namespace qvl
