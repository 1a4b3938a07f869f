// Random model folders: written, reopened and checked; determinism; sharding; the folder check's report.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "io/model_folder.h"
#include "io/random_model.h"
#include "io/safetensors.h"
#include "io/tensor_layout.h"
#include "test_support.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;

RandomModelOptions options(DType dtype = DType::BF16, uint64_t seed = 3) {
  RandomModelOptions o;
  o.dtype = dtype;
  o.seed = seed;
  o.tokenizer_dir = test::resource_dir() / "tokenizer";
  return o;
}

TEST(RandomModel, WritesAFolderThatOpensAndPassesTheCheck) {
  test::TempDir dir;
  const ModelConfig config = model_preset("demo-tiny");
  write_random_model(config, dir / "m", options());
  const ModelFolder m = ModelFolder::open(dir / "m");
  EXPECT_EQ(m.config.to_json(), [&] { ModelConfig c = config; c.dtype = DType::BF16; return c.to_json(); }());
  EXPECT_EQ(m.checkpoint.entries().size(), expected_tensors(config).size());
  EXPECT_EQ(m.checkpoint.total_bytes(), uint64_t(config.parameter_count()) * 2);
  EXPECT_EQ(m.generation.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_TRUE(fs::exists(m.tokenizer_json));
  EXPECT_TRUE(m.notes.empty());
  for (const auto& entry : fs::directory_iterator(dir.path()))  // no staging folder left behind
    EXPECT_EQ(entry.path().filename(), "m");
}

TEST(RandomModel, IsDeterministicPerSeedAndIndependentOfSharding) {
  test::TempDir dir;
  const ModelConfig config = model_preset("demo-tiny");
  write_random_model(config, dir / "a", options(DType::BF16, 5));
  write_random_model(config, dir / "b", options(DType::BF16, 5));
  write_random_model(config, dir / "c", options(DType::BF16, 6));
  RandomModelOptions sharded = options(DType::BF16, 5);
  sharded.max_shard_bytes = 256 << 10;
  write_random_model(config, dir / "d", sharded);
  EXPECT_EQ(test::read_bytes(dir / "a/model.safetensors"), test::read_bytes(dir / "b/model.safetensors"));
  EXPECT_NE(test::read_bytes(dir / "a/model.safetensors"), test::read_bytes(dir / "c/model.safetensors"));

  ASSERT_TRUE(fs::exists(dir / "d/model.safetensors.index.json"));
  const ModelFolder a = ModelFolder::open(dir / "a"), d = ModelFolder::open(dir / "d");
  EXPECT_GT(d.checkpoint.files().size(), 2u);
  for (const auto& f : d.checkpoint.files()) {
    if (f->tensors().size() > 1) {  // a lone big tensor may exceed the limit
      EXPECT_LE(fs::file_size(f->path()), (256u << 10) + 65536u);
    }
  }
  for (const auto& [name, entry] : a.checkpoint.entries()) {
    const Tensor x = a.checkpoint.tensor(name), y = d.checkpoint.tensor(name);
    ASSERT_EQ(x.nbytes(), y.nbytes()) << name;
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << name;
  }
}

TEST(RandomModel, ScalesWeightsSoActivationsStayWellConditioned) {
  test::TempDir dir;
  write_random_model(model_preset("demo-tiny"), dir / "m", options(DType::F32));
  const ModelFolder m = ModelFolder::open(dir / "m");
  auto stats = [&](const std::string& name) {
    const auto v = m.checkpoint.tensor(name).to_f32_vector();
    double sum = 0, sq = 0;
    for (float x : v) sum += x, sq += double(x) * x;
    const double mean = sum / double(v.size());
    return std::pair{mean, std::sqrt(sq / double(v.size()) - mean * mean)};
  };
  // Linear: std 1/sqrt(fan_in) keeps the output variance equal to the input's.
  const auto [gate_mean, gate_std] = stats("model.language_model.layers.0.mlp.gate_proj.weight");  // [192, 64]
  EXPECT_NEAR(gate_mean, 0.0, 0.01);
  EXPECT_NEAR(gate_std, 1.0 / 8.0, 0.01);
  const auto [down_mean, down_std] = stats("model.language_model.layers.0.mlp.down_proj.weight");  // [64, 192]
  EXPECT_NEAR(down_std, 1.0 / std::sqrt(192.0), 0.01);
  const auto [norm_mean, norm_std] = stats("model.language_model.layers.1.input_layernorm.weight");
  EXPECT_NEAR(norm_mean, 1.0, 0.05);
  EXPECT_GT(norm_std, 0.03);  // not all ones: a missing multiply by the weight would show
  const auto [emb_mean, emb_std] = stats("model.language_model.embed_tokens.weight");
  EXPECT_NEAR(emb_std * std::sqrt(64.0), 3.0, 0.05);  // logits of a unit-RMS state have std ~3
}

TEST(RandomModel, WritesEveryFloatDtypeAndRefusesToOverwrite) {
  test::TempDir dir;
  for (DType t : {DType::F16, DType::F32}) {
    const auto out = dir / std::string(dtype_name(t));
    write_random_model(model_preset("demo-tiny"), out, options(t));
    const ModelFolder m = ModelFolder::open(out);
    EXPECT_EQ(m.config.dtype, t);
    EXPECT_EQ(m.checkpoint.find("model.visual.pos_embed.weight")->info->dtype, t);
  }
  EXPECT_THROW(write_random_model(model_preset("demo-tiny"), dir / "f16", options()), Error);
  RandomModelOptions o = options();
  o.overwrite = true;
  EXPECT_NO_THROW(write_random_model(model_preset("demo-tiny"), dir / "f16", o));
  o.tokenizer_dir = dir / "nowhere";
  EXPECT_THROW(write_random_model(model_preset("demo-tiny"), dir / "x", o), Error);
  EXPECT_FALSE(fs::exists(dir / "x"));
}

// Overwrite replaces model folders only: not the folder the command runs in (or one holding it), not a folder with
// other files; what is refused is left as it was, and a replaced model is swapped in whole.
TEST(RandomModel, OverwriteReplacesModelFoldersOnly) {
  test::TempDir dir;
  RandomModelOptions o = options();
  o.overwrite = true;
  const fs::path notes = dir / "notes";
  fs::create_directories(notes);
  test::write_bytes(notes / "config.json", "{}");
  test::write_bytes(notes / "diary.txt", "not a model file");
  const auto refusal = [&](const fs::path& out) {
    try {
      write_random_model(model_preset("demo-tiny"), out, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("written");
  };
  EXPECT_NE(refusal(notes).find("'diary.txt' is not a model file"), std::string::npos) << refusal(notes);
  EXPECT_EQ(test::read_bytes(notes / "diary.txt"), "not a model file");
  const fs::path before = fs::current_path();
  fs::current_path(notes);
  for (const char* out : {".", "./", ".."})
    EXPECT_NE(refusal(out).find("current folder"), std::string::npos) << out << ": " << refusal(out);
  fs::current_path(before);
  EXPECT_TRUE(fs::exists(notes / "diary.txt"));
  // A model folder is replaced (the old one swapped out whole), and nothing is left beside it.
  write_random_model(model_preset("demo-tiny"), dir / "m", options(DType::BF16, 1));
  const std::string first = test::read_bytes(dir / "m" / "model.safetensors");
  RandomModelOptions second = options(DType::BF16, 2);
  second.overwrite = true;
  write_random_model(model_preset("demo-tiny"), dir / "m", second);
  EXPECT_NE(test::read_bytes(dir / "m" / "model.safetensors"), first);
  EXPECT_NO_THROW(ModelFolder::open(dir / "m"));
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename().string().find(".partial"), std::string::npos) << entry.path();
}

// Rewrites the folder's checkpoint with `edit` applied to the tensor list.
void rewrite_checkpoint(const fs::path& folder, const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    const Checkpoint ck = Checkpoint::open(folder);
    for (const auto& [name, e] : ck.entries()) tensors.emplace_back(name, ck.tensor(name).to(e.info->dtype));
  }
  edit(tensors);
  write_safetensors(folder / "model.safetensors", tensors);
}

TEST(ModelFolder, ReportsEveryMissingWrongAndUnexpectedTensorInOneError) {
  test::TempDir dir;
  write_random_model(model_preset("demo-tiny"), dir / "m", options());
  rewrite_checkpoint(dir / "m", [](auto& tensors) {
    std::erase_if(tensors, [](const auto& t) { return t.first == "model.language_model.layers.2.mlp.up_proj.weight"; });
    for (auto& [name, t] : tensors)
      if (name == "model.visual.merger.norm.weight") t = Tensor::zeros(DType::BF16, {7});
      else if (name == "model.language_model.norm.weight") t = Tensor::zeros(DType::I32, {64});
    tensors.emplace_back("model.extra.weight", Tensor::zeros(DType::F32, {2}));
  });
  try {
    ModelFolder::open(dir / "m");
    FAIL() << "a broken checkpoint was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("missing tensor: model.language_model.layers.2.mlp.up_proj.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("wrong tensor: model.visual.merger.norm.weight: shape [7], expected [64]"), std::string::npos) << what;
    EXPECT_NE(what.find("wrong tensor: model.language_model.norm.weight: dtype I32"), std::string::npos) << what;
    EXPECT_NE(what.find("unexpected tensor: model.extra.weight"), std::string::npos) << what;
  }
}

TEST(ModelFolder, IgnoresATiedHeadWithANote) {
  test::TempDir dir;
  write_random_model(model_preset("demo-tiny"), dir / "m", options());
  rewrite_checkpoint(dir / "m", [](auto& tensors) { tensors.emplace_back("lm_head.weight", Tensor::zeros(DType::BF16, {151936, 64})); });
  const ModelFolder m = ModelFolder::open(dir / "m");
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_NE(m.notes[0].find("ignored"), std::string::npos);
}

TEST(ModelFolder, NamesMissingFilesAndDisagreeingConfigs) {
  test::TempDir dir;
  write_random_model(model_preset("demo-tiny"), dir / "m", options());
  fs::remove(dir / "m/tokenizer.json");
  EXPECT_THROW(ModelFolder::open(dir / "m"), Error);
  test::write_bytes(dir / "m/preprocessor_config.json", R"({"patch_size": 14})");
  try {
    ModelFolder::open(dir / "m");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("preprocessor_config.json"), std::string::npos) << e.what();
  }
  test::write_bytes(dir / "m/config.json", "{ not json");
  try {
    ModelFolder::open(dir / "m");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ModelFolder::open(dir / "nothing"), Error);
}

}  // namespace
}  // namespace qvl
