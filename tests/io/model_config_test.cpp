// Config parsing against the official 2B config (4.57 spelling) and the same config as transformers 5.x saves it,
// the parameter count and tensor list against what transformers builds, and errors that name file and field.
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/model_config.h"
#include "io/random_model.h"
#include "io/tensor_layout.h"
#include "test_support.h"

namespace qvl {
namespace {

nlohmann::json golden(const std::string& name) {
  return nlohmann::json::parse(test::read_bytes(std::string(QVL_TEST_GOLDEN_DIR) + "/config/" + name));
}

void expect_2b(const ModelConfig& c) {
  EXPECT_EQ(c.text.vocab_size, 151936);
  EXPECT_EQ(c.text.hidden_size, 2048);
  EXPECT_EQ(c.text.intermediate_size, 6144);
  EXPECT_EQ(c.text.num_hidden_layers, 28);
  EXPECT_EQ(c.text.num_attention_heads, 16);
  EXPECT_EQ(c.text.num_key_value_heads, 8);
  EXPECT_EQ(c.text.head_dim, 128);
  EXPECT_EQ(c.text.rope_theta, 5e6);
  EXPECT_EQ(c.text.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_TRUE(c.text.mrope_interleaved);
  EXPECT_DOUBLE_EQ(c.text.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.vision.depth, 24);
  EXPECT_EQ(c.vision.hidden_size, 1024);
  EXPECT_EQ(c.vision.head_dim(), 64);
  EXPECT_EQ(c.vision.patch_dim(), 1536);
  EXPECT_EQ(c.vision.deepstack_visual_indexes, (std::vector<int64_t>{5, 11, 17}));
  EXPECT_EQ(c.vision.rope_theta, 10000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_EQ(c.image_token_id, 151655);
}

TEST(ModelConfig, ReadsTheOfficial457Spelling) { expect_2b(ModelConfig::from_json(golden("qwen3-vl-2b-v457.json"))); }

TEST(ModelConfig, ReadsTheTransformers5Spelling) {
  const auto j = golden("qwen3-vl-2b-v5.json");
  ASSERT_TRUE(j["text_config"].contains("rope_parameters"));  // the golden really is the other spelling
  ASSERT_FALSE(j["text_config"].contains("rope_scaling"));
  expect_2b(ModelConfig::from_json(j));
}

TEST(ModelConfig, ParameterCountAndTensorsMatchTransformers) {
  const auto ref = golden("qwen3-vl-2b-params.json");
  const ModelConfig c = ModelConfig::from_json(golden("qwen3-vl-2b-v457.json"));
  EXPECT_EQ(c.parameter_count(), ref["parameters"].get<int64_t>());
  std::map<std::string, Shape> ours;
  for (const auto& s : expected_tensors(c)) ours[s.name] = s.shape;
  std::map<std::string, Shape> theirs = ref["tensors"].get<std::map<std::string, Shape>>();
  theirs.erase("lm_head.weight");  // tied: transformers lists it, checkpoints do not hold it
  EXPECT_EQ(ours, theirs);
  EXPECT_EQ(ours.size(), 625u);
}

TEST(ModelConfig, PresetsRoundTripThroughJson) {
  for (const auto& name : model_preset_names()) {
    SCOPED_TRACE(name);
    const ModelConfig c = model_preset(name);
    const ModelConfig back = ModelConfig::from_json(c.to_json());
    EXPECT_EQ(back.to_json(), c.to_json());
  }
  expect_2b(model_preset("qwen3-vl-2b"));
  EXPECT_FALSE(model_preset("qwen3-vl-8b").tie_word_embeddings);
  EXPECT_THROW(model_preset("nope"), Error);
}

// Applies `edit` to the official config and expects from_json to fail naming `field` and saying `reason`.
void expect_config_error(const std::function<void(nlohmann::json&)>& edit, const std::string& field, const std::string& reason) {
  auto j = golden("qwen3-vl-2b-v457.json");
  edit(j);
  try {
    ModelConfig::from_json(j, "config.json");
    FAIL() << "accepted; expected an error on " << field;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("config.json: " + field), std::string::npos) << what;
    EXPECT_NE(what.find(reason), std::string::npos) << what;
  }
}

TEST(ModelConfig, NamesTheFileAndFieldOfEveryError) {
  expect_config_error([](auto& j) { j.erase("text_config"); }, "text_config", "missing");
  expect_config_error([](auto& j) { j["text_config"].erase("hidden_size"); }, "text_config.hidden_size", "missing");
  expect_config_error([](auto& j) { j["text_config"]["num_attention_heads"] = "16"; }, "text_config.num_attention_heads", "expected an integer, got string");
  expect_config_error([](auto& j) { j["text_config"]["num_key_value_heads"] = 5; }, "text_config.num_key_value_heads", "must divide");
  expect_config_error([](auto& j) { j["text_config"]["hidden_size"] = -1; }, "text_config.hidden_size", "positive");
  // Every size of the field table is checked, the optional ones too (0 and -5 positions were accepted before).
  expect_config_error([](auto& j) { j["text_config"]["max_position_embeddings"] = 0; },
                      "text_config.max_position_embeddings", "positive");
  expect_config_error([](auto& j) { j["text_config"]["max_position_embeddings"] = -5; },
                      "text_config.max_position_embeddings", "got -5");
  expect_config_error([](auto& j) { j["vision_config"]["patch_size"] = int64_t(1) << 40; }, "vision_config.patch_size",
                      "over qvl's limit of 256");
  // Sizes that allocate are bounded before anything is allocated (a million layers took 5 GB before failing).
  expect_config_error([](auto& j) { j["text_config"]["num_hidden_layers"] = 1000000; },
                      "text_config.num_hidden_layers", "is 1000000, over qvl's limit of 1024");
  expect_config_error([](auto& j) { j["text_config"]["hidden_size"] = 1000000000; }, "text_config.hidden_size",
                      "over qvl's limit");
  expect_config_error([](auto& j) { j["text_config"]["rope_scaling"]["mrope_section"] = {24, 20, 21}; },
                      "text_config.rope_scaling.mrope_section", "sum to 65");
  expect_config_error([](auto& j) { j["text_config"]["rope_scaling"]["rope_type"] = "yarn"; }, "text_config.rope_scaling.rope_type", "not supported");
  expect_config_error([](auto& j) { j["text_config"]["hidden_act"] = "gelu"; }, "text_config.hidden_act", "silu");
  expect_config_error([](auto& j) { j["vision_config"]["deepstack_visual_indexes"] = {5, 30}; }, "vision_config.deepstack_visual_indexes", "30");
  expect_config_error([](auto& j) { j["vision_config"]["out_hidden_size"] = 1024; }, "vision_config.out_hidden_size", "must equal");
  expect_config_error([](auto& j) { j["vision_config"]["num_position_embeddings"] = 2000; }, "vision_config.num_position_embeddings", "square");
  expect_config_error([](auto& j) { j["vision_config"]["num_heads"] = 3; }, "vision_config.num_heads", "divide");
  expect_config_error([](auto& j) { j["model_type"] = "llava"; }, "model_type", "qwen3_vl");
  expect_config_error([](auto& j) { j["image_token_id"] = 999999; }, "image_token_id", "outside the vocabulary");
  expect_config_error([](auto& j) { j["dtype"] = "int8"; }, "dtype", "unsupported");
  // Found by the fuzzer: a float far outside int64 was cast unchecked (undefined behaviour), and an unsigned one
  // past int64 wrapped negative.
  expect_config_error([](auto& j) { j["text_config"]["hidden_size"] = 1e122; }, "text_config.hidden_size",
                      "expected an integer, got 1e+122");
  expect_config_error([](auto& j) { j["text_config"]["hidden_size"] = uint64_t(1) << 63; }, "text_config.hidden_size",
                      "9223372036854775808 is too large");
}

TEST(ModelConfig, OptionalFieldsTakeTransformersDefaults) {
  auto j = golden("qwen3-vl-2b-v457.json");
  j["text_config"].erase("num_key_value_heads");
  j["text_config"].erase("head_dim");
  j["text_config"].erase("rope_scaling");
  j["text_config"].erase("rope_theta");
  j["vision_config"].erase("deepstack_visual_indexes");
  j["vision_config"]["depth"] = 27;
  j.erase("tie_word_embeddings");
  j["text_config"].erase("tie_word_embeddings");
  const ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.text.num_key_value_heads, 16);  // = num_attention_heads
  EXPECT_EQ(c.text.head_dim, 128);
  EXPECT_EQ(c.text.rope_theta, 5e6);
  EXPECT_EQ(c.text.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_EQ(c.vision.deepstack_visual_indexes, (std::vector<int64_t>{8, 16, 24}));
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(GenerationConfig, ReadsListsOrSingleIdsAndValidates) {
  auto g = GenerationConfig::from_json(nlohmann::json::parse(
      R"({"eos_token_id": [151645, 151643], "do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20})"));
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_TRUE(g.do_sample);
  EXPECT_EQ(g.top_k, 20);
  g = GenerationConfig::from_json(nlohmann::json::parse(R"({"eos_token_id": 151645})"));
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{151645}));
  EXPECT_FALSE(g.do_sample);  // transformers' default when the file says nothing
  EXPECT_THROW(GenerationConfig::from_json(nlohmann::json::parse(R"({"top_p": 1.5})")), Error);
  EXPECT_THROW(GenerationConfig::from_json(nlohmann::json::parse(R"({"temperature": "hot"})")), Error);
  EXPECT_THROW(GenerationConfig::from_json(nlohmann::json::parse(R"({"eos_token_id": [151645, -3]})")), Error);
  EXPECT_THROW(GenerationConfig::from_json(nlohmann::json::parse(R"({"eos_token_id": 1000000000})")), Error);
}

TEST(PreprocessorConfig, ReadsPixelBudgetsInBothSpellings) {
  auto p = PreprocessorConfig::from_json(nlohmann::json::parse(
      R"({"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "merge_size": 2,
          "temporal_patch_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})"));
  EXPECT_EQ(p.min_pixels, 65536);
  EXPECT_EQ(p.max_pixels, 16777216);
  p = PreprocessorConfig::from_json(nlohmann::json::parse(R"({"min_pixels": 3136, "max_pixels": 12845056})"));
  EXPECT_EQ(p.min_pixels, 3136);
  EXPECT_THROW(PreprocessorConfig::from_json(nlohmann::json::parse(R"({"image_std": [0.5, 0, 0.5]})")), Error);
  EXPECT_THROW(PreprocessorConfig::from_json(nlohmann::json::parse(R"({"min_pixels": 100, "max_pixels": 10})")), Error);
  EXPECT_THROW(PreprocessorConfig::from_json(nlohmann::json::parse(R"({"resample": 2})")), Error);
  // A pixel budget of 2^40 once asked for a terabyte of preprocessing buffers.
  try {
    PreprocessorConfig::from_json(nlohmann::json::parse(R"({"size": {"shortest_edge": 1099511627776,
                                                                      "longest_edge": 1099511627776}})"));
    FAIL() << "a 2^40-pixel budget accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("over qvl's limit of 268435456"), std::string::npos) << e.what();
  }
  // Found by the fuzzer: merge_size 2127532032 overflowed the pixels-per-token product (undefined behaviour).
  for (const char* field : {"merge_size", "temporal_patch_size", "patch_size"}) {
    try {
      PreprocessorConfig::from_json(nlohmann::json{{field, 2127532032}});
      FAIL() << field << " 2127532032 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("over qvl's limit of"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace qvl
