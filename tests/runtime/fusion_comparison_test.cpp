// Fused versus unfused: the fused path answers like the unfused reference (first-step logits and greedy tokens),
// the per-kernel tables show which ops ran, and the comparison leaves the engine as it found it.
#include <gtest/gtest.h>

#include <atomic>

#include <algorithm>

#include "backend/cuda_plugin.h"
#include "core/error.h"
#include "runtime/fusion_comparison.h"
#include "test_support.h"

namespace qvl {
namespace {

TEST(CompareLogits, MeasuresDistanceFromTheReference) {
  const std::vector<float> ref{1, -2, 3, 4};
  OutputDifference same = compare_logits(ref, ref);
  EXPECT_EQ(same.max_abs, 0);
  EXPECT_EQ(same.relative_l2, 0);
  EXPECT_NEAR(same.cosine, 1.0, 1e-12);
  const OutputDifference off = compare_logits(ref, {1, -2, 3, 5});
  EXPECT_DOUBLE_EQ(off.max_abs, 1.0);
  EXPECT_NEAR(off.relative_l2, 1.0 / std::sqrt(30.0), 1e-12);
  EXPECT_LT(off.cosine, 0.999);
  EXPECT_NEAR(compare_logits(ref, {-1, 2, -3, -4}).cosine, -1.0, 1e-12);
  EXPECT_THROW(compare_logits(ref, {1, 2}), Error);
}

GenerateRequest image_request() {
  GenerateRequest r;
  r.messages = {{"user", {ContentItem::image(), ContentItem::make_text("What shapes do you see?")}}};
  RgbImage image{56, 84, std::vector<uint8_t>(56 * 84 * 3)};
  for (std::size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = uint8_t((i * 2654435761u) >> 24);
  r.images.push_back(std::move(image));
  r.max_new_tokens = 8;
  r.ignore_eos = true;
  r.sampling.temperature = 0.7;  // compare_fusions makes it greedy
  return r;
}

bool ran(const FusionRun& run, const std::string& kernel) {
  return std::any_of(run.kernels.begin(), run.kernels.end(), [&](const KernelSummary& k) { return k.name.rfind(kernel, 0) == 0; });
}

// Every fusion a comparison can compare (the head's bounded pick is not: the comparison keeps every step's logits).
const std::vector<std::string> kEveryFusion{"add+rms_norm",     "linear q+k+v", "qk_norm+rope+append",
                                            "linear+swiglu",    "add+layer_norm", "bias+gelu",
                                            "flash attention", "rms_norm+linear", "layer_norm+linear"};

// `compared`: the fusions the device has kernels for (the rest are listed as without one, and not compared).
FusionComparison expect_fused_matches_unfused(Engine& engine, double max_relative_l2,
                                              const std::vector<std::string>& compared) {
  auto profiler = std::make_shared<Profiler>();
  engine.set_profiler(profiler);
  const FusionComparison c = compare_fusions(engine, image_request(), nullptr, true);
  // Each fusion alone, against none: every switch reported, the same answer, and the unfused bits exactly but for the
  // flash kernels' f16 rounding (at the first step and at the last decode step).
  EXPECT_EQ(c.each.size(), c.fusions.size());
  for (std::size_t i = 0; i < c.each.size() && i < c.fusions.size(); ++i) {
    const FusionEffect& e = c.each[i];
    EXPECT_EQ(e.name, c.fusions[i]);
    EXPECT_TRUE(e.difference.same_tokens) << e.name;
    const double limit = e.name == "flash attention" ? max_relative_l2 : 0.0;
    EXPECT_LE(e.difference.relative_l2, limit) << e.name;
    EXPECT_TRUE(e.decode_difference.has_value()) << e.name;
    if (e.decode_difference) {
      EXPECT_LE(e.decode_difference->relative_l2, limit) << e.name;
    }
  }
  EXPECT_EQ(c.fusions, compared);
  std::vector<std::string> without;
  for (const auto& f : kEveryFusion)
    if (std::find(compared.begin(), compared.end(), f) == compared.end()) without.push_back(f);
  EXPECT_EQ(c.without_kernel, without);
  EXPECT_EQ(c.timed_runs, 3);
  EXPECT_TRUE(c.difference.same_tokens);
  EXPECT_TRUE(c.decode_difference.has_value());  // 8 tokens: the last came from a decode step
  if (c.decode_difference) {
    EXPECT_GE(c.decode_difference->cosine, 0.999);
    EXPECT_LE(c.decode_difference->relative_l2, max_relative_l2);
  }
  EXPECT_EQ(c.fused.generated_ids, c.unfused.generated_ids);
  EXPECT_GE(c.difference.cosine, 0.999);
  EXPECT_LE(c.difference.relative_l2, max_relative_l2);
  EXPECT_TRUE(ran(c.fused, "add+rms_norm"));
  EXPECT_FALSE(ran(c.unfused, "add+rms_norm"));
  EXPECT_TRUE(ran(c.unfused, "add"));
  EXPECT_FALSE(ran(c.unfused, "qk_norm+rope+append"));
  EXPECT_TRUE(ran(c.unfused, "rope"));
  EXPECT_FALSE(ran(c.unfused, "linear q+k+v"));
  EXPECT_FALSE(ran(c.unfused, "add+layer_norm"));
  EXPECT_FALSE(ran(c.unfused, "bias+gelu"));
  EXPECT_TRUE(ran(c.unfused, "layer_norm"));
  // Fewer launches fused: per layer, two add + rms_norm pairs become two fused ops (and, where the backend has the
  // kernel, six prologue ops become one).
  auto calls = [](const FusionRun& r) {
    int64_t n = 0;
    for (const auto& k : r.kernels) n += k.calls;
    return n;
  };
  EXPECT_LT(calls(c.fused), calls(c.unfused));
  EXPECT_GT(c.fused.kernel_ms, 0);
  // The engine is left as it was: fusions on, the caller's profiler attached and untouched by the comparison.
  EXPECT_EQ(engine.fusions(), Fusions{});
  EXPECT_EQ(engine.profiler(), profiler);
  EXPECT_TRUE(profiler->events().empty());
  engine.set_profiler(nullptr);
  return c;
}

TEST(FusionComparison, FusedCpuPathEqualsTheUnfusedReference) {
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  // Same float operations in the same order on the CPU, which has kernels for add+rms_norm, q+k+v and SwiGLU only:
  // the others were once listed as compared and "exact" while both ways ran the same code.
  const FusionComparison c = expect_fused_matches_unfused(*engine, 0.0, {"add+rms_norm", "linear q+k+v", "linear+swiglu"});
  EXPECT_TRUE(ran(c.fused, "linear q+k+v"));
  EXPECT_TRUE(ran(c.fused, "linear+swiglu"));
  EXPECT_FALSE(ran(c.unfused, "linear+swiglu"));
  EXPECT_TRUE(ran(c.unfused, "silu_mul"));
  EXPECT_FALSE(ran(c.fused, "silu_mul"));
}

// A stopped comparison says so: its runs have no logits, and empty against empty once read as a perfect match.
TEST(FusionComparison, AStoppedComparisonFailsInsteadOfReportingAMatch) {
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  std::atomic<bool> stop{true};
  try {
    compare_fusions(*engine, image_request(), &stop, true);
    FAIL() << "a stopped comparison returned a result";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "the request was stopped");
  }
}

TEST(FusionComparison, FusedGpuPathMatchesTheUnfusedReference) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cuda"});
  // The flash kernels round q, k, v and p to f16 on tensor cores; the unfused reference stays f32.
  const FusionComparison c = expect_fused_matches_unfused(*engine, 1e-2, kEveryFusion);
  // The decode-only fusions ran where the CPU has none: the input norms folded into one GEMV launch for q, k and v
  // and one for gate/up with SwiGLU, the residual adds into the o and down GEMVs; no norm or add kernel between.
  EXPECT_TRUE(ran(c.fused, "rms_norm+linear q+k+v"));
  EXPECT_TRUE(ran(c.fused, "rms_norm+linear+swiglu"));
  EXPECT_TRUE(ran(c.fused, "linear+add"));
  EXPECT_FALSE(ran(c.unfused, "linear+add"));
  EXPECT_TRUE(ran(c.fused, "add+layer_norm"));
  EXPECT_TRUE(ran(c.fused, "bias+gelu"));  // the vision MLP's rows go through cuBLAS, whose bias is a kernel apart
  EXPECT_TRUE(ran(c.unfused, "attention softmax"));  // the CPU has one attention; the GPU's reference is unfused
  EXPECT_FALSE(ran(c.unfused, "attention segments"));
  // Every other fusion gives the unfused bits up to summation order, at the first step and in decode.
  Fusions all_but_flash;
  all_but_flash.flash_attention = false;
  engine->set_fusions(all_but_flash);
  const FusionComparison exact = compare_fusions(*engine, image_request());
  EXPECT_LE(exact.difference.relative_l2, 1e-5);
  ASSERT_TRUE(exact.decode_difference.has_value());
  EXPECT_LE(exact.decode_difference->relative_l2, 1e-5);
  // Without the norm folded in, decode runs the plain q+k+v and SwiGLU GEMVs and the fused add + RMSNorm between.
  Fusions unfolded;
  unfolded.norm_into_projection = false;
  engine->set_fusions(unfolded);
  const FusionComparison plain = compare_fusions(*engine, image_request());
  EXPECT_TRUE(ran(plain.fused, "linear q+k+v"));
  EXPECT_TRUE(ran(plain.fused, "linear+swiglu"));
  EXPECT_FALSE(ran(plain.fused, "linear+add"));
  EXPECT_FALSE(ran(plain.fused, "rms_norm+linear"));
  engine->set_fusions({});
}

TEST(FusionComparison, ADeviceWithoutKernelsForTheSwitchesOnSaysSo) {
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  Fusions no_cpu_kernel = Fusions::none();
  no_cpu_kernel.flash_attention = true;
  engine->set_fusions(no_cpu_kernel);
  try {
    compare_fusions(*engine, image_request());
    FAIL() << "a comparison of the same code both ways was made";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the CPU has no fused kernel for the fusions switched on: both ways would run the same code");
  }
  EXPECT_EQ(engine->fusions(), no_cpu_kernel);  // left as it was
}

TEST(FusionComparison, TheFusionSwitchChangesTheOpsButNotTheAnswer) {
  EngineOptions unfused{"cpu"};
  unfused.fusions = Fusions::none();
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", unfused);
  EXPECT_TRUE(engine->fusions().enabled().empty());
  const GenerateResult reference = engine->generate(image_request());
  engine->set_fusions({});
  EXPECT_EQ(engine->generate(image_request()).generated_ids, reference.generated_ids);
}

}  // namespace
}  // namespace qvl
