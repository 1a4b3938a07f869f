// A decode step is recorded once per cache (a CUDA graph) and replayed: the prompt's last pass, when it is one token
// (a prompt sent again in a kept conversation reuses all but its last token), replays the same recording as the
// decode steps after it, handing back the logits where they hand back the greedy pick.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "backend/cuda_plugin.h"
#include "backend/registry.h"
#include "core/error.h"
#include "model/rope.h"
#include "model/text_decoder.h"
#include "model/weights.h"
#include "runtime/sampler.h"
#include "test_support.h"

namespace qvl {
namespace {

struct Pass {
  std::vector<float> last_prompt_logits;           // the prompt's one-token last pass
  std::vector<int32_t> fed;                        // the ids the decode steps ran on
  std::vector<std::vector<float>> step_logits;     // Returns::Logits: each decode step's
  std::vector<int64_t> picks;                      // Returns::Pick: each decode step's
  int64_t recordings = 0;
};

int32_t largest(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// The prompt with its last token as a pass of its own, then four decode steps fed `ids` (empty: each step's own
// largest logit, which `returns` must then be Logits for).
Pass prompt_then_decode(Backend& gpu, const ModelConfig& config, const TextWeights& weights, bool record,
                        TextDecoder::Returns returns, const std::vector<int32_t>& ids) {
  const std::vector<int32_t> prompt{101, 2024, 77, 4242, 9, 880, 15, 3};
  std::array<std::vector<int64_t>, 3> axes;
  for (int64_t p = 0; p < 16; ++p)
    for (auto& a : axes) a.push_back(p);
  TextDecoder decoder(gpu, config, weights, record);
  decoder.set_step_pick({weights.lm_head.rows()});
  KvCache cache(gpu, config.text, 16);
  const auto tables = [&](std::size_t begin, std::size_t count) { return text_rope_tables(config.text, axes, begin, count); };
  const auto [cos, sin] = tables(0, prompt.size() - 1);
  decoder.forward(std::span(prompt).first(prompt.size() - 1), cos, sin, nullptr, cache);
  Pass out;
  const auto [c, s] = tables(prompt.size() - 1, 1);
  const Tensor logits = decoder.forward(std::span(prompt).last(1), c, s, nullptr, cache);
  EXPECT_EQ(logits.dtype(), DType::F32);
  out.last_prompt_logits = logits.to_f32_vector();
  int32_t id = ids.empty() ? largest(out.last_prompt_logits) : ids[0];
  for (std::size_t step = 0; step < 4; ++step) {
    out.fed.push_back(id);
    const auto [cs, sn] = tables(std::size_t(cache.length()), 1);
    const Tensor result = decoder.forward(std::span(&id, 1), cs, sn, nullptr, cache, returns);
    if (returns == TextDecoder::Returns::Pick) {
      EXPECT_EQ(result.dtype(), DType::I64);
      out.picks.push_back(result.data<int64_t>()[0]);
    } else {
      out.step_logits.push_back(result.to_f32_vector());
    }
    if (step + 1 < 4) id = ids.empty() ? largest(out.step_logits.back()) : ids[step + 1];
  }
  out.recordings = cache.recordings();
  return out;
}

TEST(DecodeRecording, AOneTokenPromptPassAndTheDecodeStepsReplayOneRecording) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  const ModelFolder model = ModelFolder::open(test::resource_dir() / "models" / "demo-tiny");
  const auto gpu = make_cuda_backend();
  const ModelWeights weights = bind_weights(model, *gpu);
  const Pass launched = prompt_then_decode(*gpu, model.config, weights.text, false, TextDecoder::Returns::Logits, {});
  const Pass recorded = prompt_then_decode(*gpu, model.config, weights.text, true, TextDecoder::Returns::Pick, launched.fed);
  EXPECT_EQ(recorded.recordings, 1);  // not one for the prompt's pass (logits) and another for the picks
  EXPECT_EQ(launched.recordings, 0);
  // The recording attends with the split sized for the whole cache, the launched pass for its keys: other sums. So
  // the picks are held to the launched logits' largest where it leads the runner-up clearly.
  EXPECT_LT(test::relative_error(recorded.last_prompt_logits, launched.last_prompt_logits), 1e-4);
  int clear = 0;
  for (std::size_t i = 0; i < recorded.picks.size(); ++i) {
    std::vector<float> v = launched.step_logits[i];
    const int32_t top = largest(v);
    const float best = v[std::size_t(top)];
    v[std::size_t(top)] = -INFINITY;
    if (best - *std::max_element(v.begin(), v.end()) < 1e-3f * std::fabs(best)) continue;
    ++clear;
    EXPECT_EQ(recorded.picks[i], top) << "step " << i;
  }
  EXPECT_GE(clear, 2);  // the trained demo model leads clearly on most steps
}

// Asking a pass of several tokens, or a decoder without the greedy pick, for the pick is an error, not the logits.
TEST(DecodeRecording, OnlyOneTokenPassesWithTheGreedyPickOnHandBackAPick) {
  const ModelFolder model = ModelFolder::open(test::resource_dir() / "models" / "demo-tiny");
  const auto cpu = create_backend(BackendKind::Cpu);
  const ModelWeights weights = bind_weights(model, *cpu);
  TextDecoder decoder(*cpu, model.config, weights.text);
  KvCache cache(*cpu, model.config.text, 8);
  std::array<std::vector<int64_t>, 3> axes{{{0, 1}, {0, 1}, {0, 1}}};
  const auto [cos, sin] = text_rope_tables(model.config.text, axes, 0, 2);
  const std::vector<int32_t> two{5, 6};
  EXPECT_THROW(decoder.forward(std::span(two).first(1), cos, sin, nullptr, cache, TextDecoder::Returns::Pick), Error);
  decoder.set_step_pick({weights.text.lm_head.rows()});
  EXPECT_THROW(decoder.forward(two, cos, sin, nullptr, cache, TextDecoder::Returns::Pick), Error);
  EXPECT_EQ(cache.length(), 0);  // refused before anything ran
  // Steps are queued only where a step is recorded (never on the CPU).
  EXPECT_FALSE(decoder.can_queue_steps(cache));
  EXPECT_THROW(decoder.queue_step(5, 0, cache), Error);
  EXPECT_THROW(decoder.take_step(cache), Error);
}

// The demo model on the GPU, a prompt and positions counting up: decoding ahead's tests.
class QueuedSteps : public ::testing::Test {
protected:
  void SetUp() override {
    if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
    gpu = make_cuda_backend();
    weights = bind_weights(model, *gpu);
    for (int64_t p = 0; p < 24; ++p)
      for (auto& a : axes) a.push_back(p);
  }
  std::pair<Tensor, Tensor> tables(int64_t begin, int64_t count = 1) const {
    return text_rope_tables(model.config.text, axes, std::size_t(begin), std::size_t(count));
  }
  const ModelFolder model = ModelFolder::open(test::resource_dir() / "models" / "demo-tiny");
  std::unique_ptr<Backend> gpu;
  ModelWeights weights;
  std::array<std::vector<int64_t>, 3> axes;
  // A prompt whose greedy answer changes token (most of the demo model's answers to raw ids repeat one: on the CPU
  // this one's are 3046, 105257, 65770, 65770, 140610, ...).
  const std::vector<int32_t> prompt{40, 1075, 311, 2506, 264, 3364, 911, 13};
};

// Decoding ahead: steps queued with the next one's token taken from the pick on the device (queue_step, take_step)
// hand back the picks that forward's steps hand back, one at a time, and a queued step that is dropped leaves the
// cache as it was: forward's next step after it gives the same pick as without it.
TEST_F(QueuedSteps, HandBackForwardsPicksAndADroppedOneChangesNothing) {
  const auto start = [&](TextDecoder& decoder, KvCache& cache) {
    decoder.set_step_pick({weights.text.lm_head.rows()});
    const auto [cos, sin] = tables(0, int64_t(prompt.size()));
    return largest(decoder.forward(prompt, cos, sin, nullptr, cache).to_f32_vector());
  };
  const auto step = [&](TextDecoder& decoder, KvCache& cache, int32_t id) {
    const auto [c, s] = tables(cache.length());
    return int32_t(decoder.forward(std::span(&id, 1), c, s, nullptr, cache, TextDecoder::Returns::Pick).data<int64_t>()[0]);
  };
  TextDecoder reference(*gpu, model.config, weights.text);
  KvCache reference_cache(*gpu, model.config.text, 24);
  std::vector<int32_t> ids{start(reference, reference_cache)};
  for (int i = 0; i < 8; ++i) ids.push_back(step(reference, reference_cache, ids.back()));
  // A token read from the device and a stale one would agree where the answer repeats one token throughout.
  ASSERT_GT(std::set<int32_t>(ids.begin() + 1, ids.begin() + 7).size(), 1u);

  TextDecoder decoder(*gpu, model.config, weights.text);
  KvCache cache(*gpu, model.config.text, 24);
  ASSERT_EQ(start(decoder, cache), ids[0]);
  EXPECT_FALSE(decoder.can_queue_steps(cache));  // nothing recorded yet (a prompt under kRecordBehindRows tokens)
  ASSERT_EQ(step(decoder, cache, ids[0]), ids[1]);  // records the step
  ASSERT_TRUE(decoder.can_queue_steps(cache));
  decoder.queue_step(ids[1], 0, cache);
  for (std::size_t i = 2; i <= 6; ++i) {  // the step for ids[i - 1] is queued; queue the one for ids[i], take one
    decoder.queue_step(TextDecoder::kPickedOnDevice, 0, cache);
    EXPECT_EQ(decoder.take_step(cache).data<int64_t>()[0], ids[i]) << "step " << i;
    EXPECT_EQ(cache.length(), int64_t(prompt.size() + i));
  }
  EXPECT_THROW(step(decoder, cache, ids[6]), Error);  // a pass while a step is queued
  {
    decoder.queue_step(TextDecoder::kPickedOnDevice, 0, cache);  // two queued: the most
    EXPECT_THROW(decoder.queue_step(TextDecoder::kPickedOnDevice, 0, cache), Error);
    KvCache other(*gpu, model.config.text, 24);
    EXPECT_THROW(decoder.take_step(other), Error);  // queued for `cache`
  }
  decoder.drop_queued_steps();
  EXPECT_THROW(decoder.queue_step(TextDecoder::kPickedOnDevice, 0, cache), Error);  // nothing queued before it
  decoder.queue_step(ids[6], 0, cache);
  EXPECT_THROW(decoder.queue_step(TextDecoder::kPickedOnDevice, 1, cache), Error);  // the step before it rotated at 0
  decoder.drop_queued_steps();  // the step for ids[6], queued: it ran, its position is past the cache's length
  decoder.queue_step(ids[6] == 5 ? 6 : 5, 0, cache);  // another token at that position, dropped too
  decoder.drop_queued_steps();
  EXPECT_EQ(step(decoder, cache, ids[6]), ids[7]);
  EXPECT_EQ(step(decoder, cache, ids[7]), ids[8]);
  EXPECT_EQ(cache.length(), reference_cache.length());
}

// The output head's bounds copy (Backend::prepare_head_pick): recorded and queued steps that pick from it hand back
// what steps computing every logit hand back, greedy and top-k with the draw (the whole result: candidates, their
// values, the draw and its state), and the prompt's one-token last pass, which wants its logits, gets every one (it
// runs directly, not as the recorded step).
TEST_F(QueuedSteps, PickFromTheHeadsBoundsCopyAsFromEveryLogit) {
  const int64_t vocabulary = weights.text.lm_head.rows();
  ASSERT_TRUE(gpu->prepare_head_pick(weights.text.lm_head));  // the demo model's 48-wide head: one partial slab
  for (const TextDecoder::StepPick pick : {TextDecoder::StepPick{vocabulary}, TextDecoder::StepPick{vocabulary, 20, 0.7, 0.8}}) {
    const auto run = [&](bool bounded) {
      Fusions fusions;
      fusions.bounded_head_pick = bounded;
      gpu->set_fusions(fusions);
      TextDecoder decoder(*gpu, model.config, weights.text);
      decoder.set_step_pick(pick);
      KvCache cache(*gpu, model.config.text, 24);
      const auto [cos, sin] = tables(0, int64_t(prompt.size()) - 1);
      decoder.forward(std::span(prompt).first(prompt.size() - 1), cos, sin, nullptr, cache);
      const auto [c, s] = tables(cache.length());
      const std::vector<float> last = decoder.forward(std::span(prompt).last(1), c, s, nullptr, cache).to_f32_vector();
      EXPECT_TRUE(decoder.can_queue_steps(cache));  // that pass recorded the step
      std::vector<std::vector<int64_t>> steps;
      decoder.queue_step(largest(last), 0, cache, pick.top_k > 0 ? std::optional<uint64_t>(0x5eed) : std::nullopt);
      for (int i = 0; i < 6; ++i) {
        decoder.queue_step(TextDecoder::kPickedOnDevice, 0, cache);
        const Tensor handed = decoder.take_step(cache);
        steps.emplace_back(handed.data<int64_t>(), handed.data<int64_t>() + handed.numel());
      }
      decoder.drop_queued_steps();
      return std::pair{last, steps};
    };
    const auto [every_logit, every_steps] = run(false);
    const auto [bounded_logits, bounded_steps] = run(true);
    const std::string what = pick.top_k > 0 ? "top-k" : "greedy";
    EXPECT_EQ(bounded_logits, every_logit) << what;
    EXPECT_EQ(bounded_steps, every_steps) << what;
    ASSERT_EQ(every_steps.size(), 6u);
    EXPECT_GT(std::set<std::vector<int64_t>>(every_steps.begin(), every_steps.end()).size(), 1u) << what;
  }
  gpu->set_fusions({});
}

// A step queued after another rotates at the position its hand-off set on the device, from the ring of rotary rows
// the host refills every 63 steps: 150 queued steps (three fills) at a rope delta of 7 (a prompt after an image) give
// forward's picks, and the cache they leave gives forward's next logits bit for bit (the same recorded kernels; a
// key rotated at a wrong position would change them). Twice the step queued ahead whose queueing refilled the ring
// is dropped and queued again with the host's token, as after a sampled draw that differed.
TEST_F(QueuedSteps, RotateAtTheirPositionsAcrossTheRingsRefills) {
  constexpr int64_t kDelta = 7, kSteps = 150, kCapacity = 8 + kSteps + 2;
  std::array<std::vector<int64_t>, 3> shifted;
  for (int64_t p = 0; p < kCapacity; ++p)
    for (auto& a : shifted) a.push_back(p + kDelta);
  const auto rows = [&](int64_t begin, int64_t count = 1) {
    return text_rope_tables(model.config.text, shifted, std::size_t(begin), std::size_t(count));
  };
  const auto start = [&](TextDecoder& decoder, KvCache& cache) {
    decoder.set_step_pick({weights.text.lm_head.rows()});
    const auto [cos, sin] = rows(0, int64_t(prompt.size()));
    return largest(decoder.forward(prompt, cos, sin, nullptr, cache).to_f32_vector());
  };
  const auto step = [&](TextDecoder& decoder, KvCache& cache, int32_t id, TextDecoder::Returns returns) {
    const auto [c, s] = rows(cache.length());
    return decoder.forward(std::span(&id, 1), c, s, nullptr, cache, returns);
  };
  TextDecoder reference(*gpu, model.config, weights.text);
  KvCache reference_cache(*gpu, model.config.text, kCapacity);
  std::vector<int32_t> ids{start(reference, reference_cache)};
  for (int64_t i = 0; i < kSteps; ++i)
    ids.push_back(int32_t(step(reference, reference_cache, ids.back(), TextDecoder::Returns::Pick).data<int64_t>()[0]));

  TextDecoder decoder(*gpu, model.config, weights.text);
  KvCache cache(*gpu, model.config.text, kCapacity);
  ASSERT_EQ(start(decoder, cache), ids[0]);
  ASSERT_EQ(step(decoder, cache, ids[0], TextDecoder::Returns::Pick).data<int64_t>()[0], ids[1]);
  decoder.queue_step(ids[1], kDelta, cache);
  for (int64_t i = 2; i <= kSteps; ++i) {
    if (i < kSteps) decoder.queue_step(TextDecoder::kPickedOnDevice, kDelta, cache);
    ASSERT_EQ(decoder.take_step(cache).data<int64_t>()[0], ids[std::size_t(i)]) << "step " << i;
    if (i == 64 || i == 127) {  // the step queued ahead (fed ids[i] at position 8 + i) refilled the ring
      decoder.drop_queued_steps();
      decoder.queue_step(ids[std::size_t(i)], kDelta, cache);
    }
  }
  ASSERT_EQ(cache.length(), reference_cache.length());
  const std::vector<float> expected = step(reference, reference_cache, ids.back(), TextDecoder::Returns::Logits).to_f32_vector();
  EXPECT_EQ(step(decoder, cache, ids.back(), TextDecoder::Returns::Logits).to_f32_vector(), expected);
}

// Sampled decoding ahead: a sampled step also draws its token on the device (Backend::top_k_candidates' draw, from the
// sampler's state), and the step queued after it embeds that token. The host's sampler, drawing from the candidates
// take_step hands back, draws those very tokens, and they are the tokens of sampled steps run one at a time.
TEST_F(QueuedSteps, SampledOnesEmbedTheHostsDraws) {
  SamplingOptions options;
  options.temperature = 0.9, options.top_k = 40, options.top_p = 0.9, options.seed = 3;
  const TextDecoder::StepPick pick{weights.text.lm_head.rows(), 40, 0.9, 0.9};
  const auto start = [&](TextDecoder& decoder, KvCache& cache, Sampler& sampler) {
    decoder.set_step_pick(pick);
    const auto [cos, sin] = tables(0, int64_t(prompt.size()));
    std::vector<float> logits = decoder.forward(prompt, cos, sin, nullptr, cache).to_f32_vector();
    return sampler.next(logits, {});
  };
  const auto draw = [&](TextDecoder& decoder, Sampler& sampler, const Tensor& taken) {
    EXPECT_EQ(taken.dtype(), DType::I64);
    const TopKResult found = decoder.candidates(taken);
    EXPECT_TRUE(found.fitted);
    return sampler.next_from_candidates(found.candidates, found.nan);
  };
  const auto step = [&](TextDecoder& decoder, KvCache& cache, Sampler& sampler, int32_t id) {
    const auto [c, s] = tables(cache.length());
    return draw(decoder, sampler, decoder.forward(std::span(&id, 1), c, s, nullptr, cache, TextDecoder::Returns::Pick));
  };
  TextDecoder reference(*gpu, model.config, weights.text);
  KvCache reference_cache(*gpu, model.config.text, 24);
  Sampler reference_sampler(options);
  std::vector<int32_t> ids{start(reference, reference_cache, reference_sampler)};
  for (int i = 0; i < 8; ++i) ids.push_back(step(reference, reference_cache, reference_sampler, ids.back()));
  ASSERT_GT(std::set<int32_t>(ids.begin(), ids.end()).size(), 3u);  // draws, not one token throughout

  TextDecoder decoder(*gpu, model.config, weights.text);
  KvCache cache(*gpu, model.config.text, 24);
  Sampler sampler(options);
  ASSERT_EQ(start(decoder, cache, sampler), ids[0]);
  ASSERT_EQ(step(decoder, cache, sampler, ids[0]), ids[1]);
  ASSERT_TRUE(decoder.can_queue_steps(cache));
  decoder.queue_step(ids[1], 0, cache, sampler.draw_state());
  for (std::size_t i = 2; i <= 7; ++i) {  // the step for ids[i - 1] is queued; queue the one for ids[i], take one
    decoder.queue_step(TextDecoder::kPickedOnDevice, 0, cache);
    const Tensor taken = decoder.take_step(cache);
    ASSERT_TRUE(taken.numel());
    const int32_t drawn = draw(decoder, sampler, taken);
    EXPECT_EQ(drawn, ids[i]) << "step " << i;
    EXPECT_EQ(decoder.picked_on_device(taken), drawn) << "step " << i;
  }
  decoder.drop_queued_steps();  // the step for ids[7]: run, never taken
  EXPECT_EQ(step(decoder, cache, sampler, ids[7]), ids[8]);
  EXPECT_EQ(cache.length(), reference_cache.length());

  // Candidates that did not fit (forced): take_step hands back nothing and takes nothing; forward then gives the logits.
  gpu->inject_fault({.candidates_do_not_fit = true});
  TextDecoder unfitted(*gpu, model.config, weights.text);
  KvCache unfitted_cache(*gpu, model.config.text, 24);
  Sampler unfitted_sampler(options);
  start(unfitted, unfitted_cache, unfitted_sampler);
  const auto [c1, s1] = tables(unfitted_cache.length());
  EXPECT_EQ(unfitted.forward(std::span(&ids[0], 1), c1, s1, nullptr, unfitted_cache, TextDecoder::Returns::Pick).dtype(),
            DType::F32);  // recorded with the fault
  const int64_t length = unfitted_cache.length();
  const auto [c2, s2] = tables(length);
  unfitted.queue_step(ids[1], 0, unfitted_cache, unfitted_sampler.draw_state());
  unfitted.queue_step(TextDecoder::kPickedOnDevice, 0, unfitted_cache);
  EXPECT_EQ(unfitted.take_step(unfitted_cache).numel(), 0);
  EXPECT_EQ(unfitted_cache.length(), length);
  const Tensor again = unfitted.forward(std::span(&ids[1], 1), c2, s2, nullptr, unfitted_cache, TextDecoder::Returns::Pick);
  EXPECT_EQ(again.dtype(), DType::F32);  // the logits; the step after it was dropped with the rest
  EXPECT_EQ(unfitted_cache.length(), length + 1);
  gpu->inject_fault({});
}

}  // namespace
}  // namespace qvl
