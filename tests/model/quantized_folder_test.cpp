// qvl quantize's folders (model/quantized_folder.h): a quantised folder loads without quantising again and computes
// exactly what quantising at load computes; the dequantised folder holds the floats the quantised model multiplies
// with; the refusals name what is wrong.
#include <gtest/gtest.h>

#include "backend/quantize.h"
#include "io/atomic_file.h"
#include "io/json_fields.h"
#include "io/model_folder.h"
#include "io/random_model.h"
#include "io/tensor_layout.h"
#include "model/quantized_folder.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "test_support.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;

const fs::path kDemo = test::resource_dir() / "models" / "demo-shapes";

GenerateRequest one_question() {
  GenerateRequest r;
  r.messages = {ChatMessage::text("user", "What shapes do you see?")};
  r.max_new_tokens = 4;
  r.keep_step_logits = true;
  return r;
}

std::vector<float> first_logits(const fs::path& model, const std::string& weights) {
  EngineOptions options{"cpu"};
  options.weights = weights;
  const auto engine = Engine::load(model, options);
  return engine->generate(one_question()).first_step_logits;
}

TEST(QuantizedFolder, LoadsAsQuantisingAtLoadComputes) {
  test::TempDir dir;
  const ModelFolder demo = ModelFolder::open(kDemo);
#ifdef QVL_SANITIZED_BUILD
  const std::vector<std::string> policies{"q4"};  // nine engine loads took 3 minutes under the sanitizers; three do
#else
  const std::vector<std::string> policies{"q8", "q8-g32", "q4", "q4-g64"};
#endif
  for (const std::string& weights : policies) {
    const fs::path out = dir / weights;
    write_quantized_model(demo, *WeightPolicy::from_name(weights).quantise, out, false);
    const ModelFolder q = ModelFolder::open(out);
    ASSERT_TRUE(q.config.quantization);
    EXPECT_EQ(q.config.quantization->name(), weights);
    // The demo's bf16 weights are half embedding table (151,936 x 48, q8 in every policy: 1.06 bytes a value) and a
    // fifth vision position table (kept): 0.64 of the bytes at q8-g32 (measured), less at q4. q8's groups of 128 pad
    // the linear layers' rows of 48 values to 128 and of 192 to 256: 0.668 (measured).
    const double bound = weights == "q8" ? 0.68 : weights == "q8-g32" ? 0.66 : 0.62;
    EXPECT_LT(double(q.checkpoint.total_bytes()), bound * double(demo.checkpoint.total_bytes())) << weights;
    EXPECT_TRUE(fs::exists(out / "tokenizer.json") && fs::exists(out / "preprocessor_config.json"));
    EXPECT_EQ(first_logits(out, "bf16"), first_logits(kDemo, weights)) << weights;
    EXPECT_EQ(first_logits(out, weights), first_logits(kDemo, weights)) << weights;  // its own policy: as stored
    // Another policy, even one of the same format in other groups (q8-g32's folder under q8), is refused with what
    // would load it.
    const std::string refused =
        test::error_within(std::chrono::seconds(30), [&] { first_logits(out, weights == "q8" ? "q4" : "q8"); });
    EXPECT_NE(refused.find("would quantise them twice"), std::string::npos) << refused;
    EXPECT_NE(refused.find("--weights bf16 or " + weights + " uses them as they are"), std::string::npos) << refused;
  }
}

TEST(QuantizedFolder, DequantisedFolderHoldsTheFloatsTheQuantisedModelUses) {
  test::TempDir dir;
  const ModelFolder demo = ModelFolder::open(kDemo);
  write_quantized_model(demo, *WeightPolicy::from_name("q4").quantise, dir / "q4", false);
  const ModelFolder q4 = ModelFolder::open(dir / "q4");
  write_dequantized_model(q4, std::nullopt, dir / "from-folder", false);
  write_dequantized_model(demo, WeightPolicy::from_name("q4").quantise, dir / "from-policy", false);
  for (const char* name : {"from-folder", "from-policy"}) {
    const ModelFolder d = ModelFolder::open(dir / name);
    EXPECT_FALSE(d.config.quantization);
    EXPECT_EQ(d.config.dtype, DType::F32);
    const std::string w = "model.language_model.layers.0.mlp.down_proj.weight";
    const Tensor stored = q4.checkpoint.tensor(w);
    const LinearWeights unit = LinearWeights::quantised_of(WeightFormat::Q4, 32, stored.dim(1) * 2, stored,
                                                           q4.checkpoint.tensor(scale_name(w)));
    const Tensor want = dequantize_matrix(unit), got = d.checkpoint.tensor(w);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(0, std::memcmp(got.raw(), want.raw(), got.nbytes())) << name;
    // Untouched tensors are copied as they are (a norm).
    const std::string norm = "model.language_model.layers.0.input_layernorm.weight";
    EXPECT_EQ(0, std::memcmp(d.checkpoint.tensor(norm).raw(), demo.checkpoint.tensor(norm).raw(),
                             demo.checkpoint.tensor(norm).nbytes()));
  }
  // The embedding is q8 in a q4 model: dequantised the same way, into the original shape.
  const ModelFolder d = ModelFolder::open(dir / "from-folder");
  EXPECT_EQ(d.checkpoint.tensor("model.visual.patch_embed.proj.weight").shape(),
            demo.checkpoint.tensor("model.visual.patch_embed.proj.weight").shape());
}

TEST(QuantizedFolder, RefusesWhatItCannotDo) {
  test::TempDir dir;
  const ModelFolder demo = ModelFolder::open(kDemo);
  write_quantized_model(demo, *WeightPolicy::from_name("q8").quantise, dir / "q8", false);
  const ModelFolder q8 = ModelFolder::open(dir / "q8");
  const auto error = [](const std::function<void()>& work) { return test::error_within(std::chrono::seconds(30), work); };
  EXPECT_NE(error([&] { write_quantized_model(q8, *WeightPolicy::from_name("q4").quantise, dir / "x", false); })
                .find("already quantised (q8)"),
            std::string::npos);
  EXPECT_NE(error([&] { write_dequantized_model(demo, std::nullopt, dir / "y", false); }).find("not quantised"),
            std::string::npos);
  EXPECT_NE(error([&] { write_quantized_model(demo, *WeightPolicy::from_name("q4").quantise, dir / "q8", false); })
                .find("already exists"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "x"));
  EXPECT_NE(error([&] { write_dequantized_model(q8, std::nullopt, dir / "q8", true); }).find("is the folder being read"),
            std::string::npos);
  // A Hugging Face folder's other files (merges, a chat template) go along, and the result can be replaced again.
  fs::copy(kDemo, dir / "hf", fs::copy_options::recursive);
  test::write_bytes(dir / "hf" / "merges.txt", "#version: 0.2\n");
  test::write_bytes(dir / "hf" / "chat_template.jinja", "{{ messages }}");
  const ModelFolder hf = ModelFolder::open(dir / "hf");
  for (int round = 0; round < 2; ++round)
    write_quantized_model(hf, *WeightPolicy::from_name("q8").quantise, dir / "hf-q8", round == 1);
  EXPECT_TRUE(fs::exists(dir / "hf-q8" / "merges.txt") && fs::exists(dir / "hf-q8" / "chat_template.jinja"));

  // A config that says quantised over unquantised tensors: each wrong tensor named with the shape it should have.
  fs::copy(kDemo, dir / "claims", fs::copy_options::recursive);
  auto config = read_json_file(dir / "claims" / "config.json");
  config["quantization_config"] = {{"quant_method", "qvl"}, {"weights", "q4"}, {"group_size", 32}, {"embedding", "q8"}};
  write_file_atomically(dir / "claims" / "config.json", config.dump());
  const std::string mismatch = error([&] { ModelFolder::open(dir / "claims"); });
  EXPECT_NE(mismatch.find("missing tensor: model.language_model.embed_tokens.weight_scale"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("wrong tensor: model.language_model.layers.0.mlp.down_proj.weight: shape [48, 192], expected [48, 96]"),
            std::string::npos)
      << mismatch;
  // Other quantisations, and bad fields, are named.
  for (const auto& [field, value, message] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"quant_method", "gptq", "quantization_config.quant_method: 'gptq' is not read by qvl"},
           {"weights", "q3", "quantization_config.weights: expected q8 or q4, got 'q3'"},
           {"group_size", 48, "quantization_config.group_size"}}) {
    auto bad = config;
    bad["quantization_config"][field] = value;
    write_file_atomically(dir / "claims" / "config.json", bad.dump());
    const std::string e = error([&] { ModelFolder::open(dir / "claims"); });
    EXPECT_NE(e.find(message), std::string::npos) << e;
  }
  // Random weights are written unquantised only.
  ModelConfig c = model_preset("demo-tiny");
  c.quantization = QuantizationConfig{};
  RandomModelOptions o;
  o.tokenizer_dir = test::resource_dir() / "tokenizer";
  EXPECT_NE(error([&] { write_random_model(c, dir / "r", o); }).find("then run qvl quantize"), std::string::npos);
  EXPECT_NE(error([&] { WeightPolicy::from_name("q5"); }).find("choose bf16"), std::string::npos);
}

}  // namespace
}  // namespace qvl
