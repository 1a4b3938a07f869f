// The engine's behaviour around generation: streaming equals the final text, cancellation from another thread
// stops within one token, stop tokens, and bad requests fail clearly while the engine stays usable.
#include <gtest/gtest.h>

#include <cstdint>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <thread>

#include "backend/backend.h"
#include "backend/cpu/head_bounds.h"
#include "backend/cpu/huge_pages.h"
#include "backend/cuda_plugin.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/fusion_comparison.h"
#include "runtime/profiler.h"
#include "test_support.h"

namespace qvl {
namespace {

Engine& demo_engine() {
  static const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  return *engine;
}

GenerateRequest text_request(const std::string& prompt, int64_t max_new) {
  GenerateRequest r;
  r.messages = {ChatMessage::text("user", prompt)};
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  return r;
}

struct CollectingSink : TokenSink {
  std::vector<int32_t> ids;
  std::string text;
  std::function<void()> after_token;
  std::vector<GenerateTiming> prompts;  // on_prompt_done calls
  std::size_t tokens_before_prompt_done = 0;
  void on_prompt_done(const GenerateTiming& t) override {
    prompts.push_back(t);
    tokens_before_prompt_done = ids.size();
  }
  void on_token(int32_t id, const std::string& piece) override {
    if (id >= 0) ids.push_back(id);
    text += piece;
    if (after_token) after_token();
  }
};

TEST(Engine, StreamsExactlyTheTokensAndTextItReturns) {
  CollectingSink sink;
  const GenerateResult r = demo_engine().generate(text_request("Tell me a story.", 12), &sink);
  EXPECT_EQ(r.generated_ids.size(), 12u);
  EXPECT_EQ(sink.ids, r.generated_ids);
  EXPECT_EQ(sink.text, r.text);
  EXPECT_EQ(r.text, demo_engine().tokenizer().decode(r.generated_ids, true));
  EXPECT_EQ(r.stop_reason, "max_new_tokens");
  EXPECT_EQ(r.first_step_top.size(), 20u);
  EXPECT_EQ(r.generated_ids[0], r.first_step_top[0].first);  // greedy takes the top logit
  // The prompt's numbers arrive once, before the first token, and are the result's.
  ASSERT_EQ(sink.prompts.size(), 1u);
  EXPECT_EQ(sink.tokens_before_prompt_done, 0u);
  EXPECT_EQ(sink.prompts[0].prompt_tokens, r.timing.prompt_tokens);
  EXPECT_EQ(sink.prompts[0].prefill_ms, r.timing.prefill_ms);
}

TEST(Engine, CancelFromAnotherThreadStopsWithinOneToken) {
  std::atomic<bool> cancel{false};
  std::atomic<int> tokens{0};
  CollectingSink sink;
  sink.after_token = [&] {
    if (++tokens == 3) {
      std::thread([&] { cancel = true; }).join();  // set by another thread, as the GUI's stop button does
    }
  };
  const GenerateResult r = demo_engine().generate(text_request("Count to a thousand.", 500), &sink, &cancel);
  EXPECT_EQ(r.stop_reason, "cancelled");
  EXPECT_EQ(r.generated_ids.size(), 3u);
}

// Esc reaches every phase: images, the vision tower and the prefill check the flag between their units of work (and
// the CPU inside its long products), so a stop set at any moment of a long prompt ends the request within 50 ms.
TEST(EngineTiming, AStopDuringImagesVisionOrPrefillEndsTheRequestWithin50Ms) {
#ifdef QVL_SANITIZED_BUILD
  constexpr double kLimitMs = 400;  // the sanitizers slow every kernel several times
#else
  constexpr double kLimitMs = 50;
#endif
  EngineOptions options{"cpu"};
  options.vision_cache_bytes = 0;  // every run encodes its pictures (kept, the warm-up's would be reused)
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-shapes", options);
  // Three pictures and `words` words of text.
  const auto request_of = [](int words) {
    GenerateRequest r;
    ChatMessage user{"user", {}};
    for (const char* name : {"scene-1.png", "scene-2.png", "scene-3.png"}) {
      user.content.push_back(ContentItem::image());
      r.images.push_back(ImageInput::file(test::resource_dir() / "samples" / name));
    }
    std::string text;
    for (int i = 0; i < words; ++i) text += " shapes";
    user.content.push_back(ContentItem::make_text(text));
    r.messages = {user};
    r.max_new_tokens = 1;
    r.image_min_tokens = r.image_max_tokens = 256;  // a vision pass long enough to be stopped in
    return r;
  };
  using Clock = std::chrono::steady_clock;
  // A fast host runs 1,500 words in under 4 limits (the GPU machine's 16 cores: 199 ms, 2026-11-30): twice the text
  // then (~3,800 tokens, within the model's 4,096).
  GenerateRequest r;
  GenerateResult whole;
  for (const int words : {1500, 3000}) {
    r = request_of(words);
    engine->generate(r);  // warm: the moments below come from a run like the ones stopped
    whole = engine->generate(r);
    if (whole.timing.vision_ms + whole.timing.prefill_ms > 4 * kLimitMs) break;
  }
  const GenerateTiming& w = whole.timing;
  ASSERT_GT(w.vision_ms + w.prefill_ms, 4 * kLimitMs) << "the request is too short to stop inside it";
  // Where a stopped run stopped: a phase's time is set when the phase ends.
  enum Phase { kImages, kVision, kPrefill, kAfter };
  auto stop_once = [&](double at_ms) {
    std::atomic<bool> cancel{false};
    Clock::time_point set_at;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(at_ms));
      set_at = Clock::now();
      cancel = true;
    });
    const GenerateResult stopped = engine->generate(r, nullptr, &cancel);
    const auto returned = Clock::now();
    stopper.join();
    if (stopped.stop_reason != "cancelled") {
      EXPECT_LT(returned, set_at) << "not stopped, yet the stop came before the end";
      std::printf("[ info ] a stop at %.0f ms came after the run had ended\n", at_ms);
      return kAfter;
    }
    const GenerateTiming& t = stopped.timing;
    const Phase phase = t.preprocess_ms == 0 ? kImages : t.vision_ms == 0 ? kVision : t.prefill_ms == 0 ? kPrefill : kAfter;
    // Stopped before the prefill ended: no token. (A run faster than the warm one can take the stop after its prefill,
    // with its one token out: CI, 2026-11-28, a stop at 1,317 of 1,545 ms. That stop is then aimed again.)
    if (phase != kAfter) {
      EXPECT_TRUE(stopped.generated_ids.empty()) << at_ms;
    }
    const double stop_ms = std::chrono::duration<double, std::milli>(returned - set_at).count();
    std::printf("[ info ] stopped at %.0f of %.0f ms (images %.0f, vision %.0f, prefill %.0f), in %s: returned in %.1f ms\n",
                at_ms, w.preprocess_ms + w.vision_ms + w.prefill_ms, w.preprocess_ms, w.vision_ms, w.prefill_ms,
                phase == kVision ? "the vision tower" : phase == kPrefill ? "the prefill" : "another phase", stop_ms);
    EXPECT_LE(stop_ms, kLimitMs) << "stopped at " << at_ms << " ms";
    return phase;
  };
  // A stop aimed at the middle of each phase of the warm run. Runs vary (the GPU machine's host by a third, more
  // under the sanitizers, where stops at fixed moments once all missed the vision tower): a stop that lands in
  // another phase is aimed again, earlier or later by a shrinking step, up to eight times a phase.
  for (const Phase target : {kVision, kPrefill}) {
    const double start = target == kVision ? w.preprocess_ms : w.preprocess_ms + w.vision_ms;
    const double length = target == kVision ? w.vision_ms : w.prefill_ms;
    double at = start + 0.5 * length, step = 0.3 * length;
    bool landed = false;
    for (int attempt = 0; attempt < 8 && !landed; ++attempt) {
      const Phase phase = stop_once(at);
      landed = phase == target;
      at = std::max(0.0, phase < target ? at + step : at - step);
      step *= 0.7;
    }
    EXPECT_TRUE(landed) << "no stop landed in " << (target == kVision ? "the vision tower" : "the prefill");
  }
  EXPECT_EQ(engine->generate(r).generated_ids, whole.generated_ids);  // and the engine answers on as before
}

TEST(Engine, StopsAtAStopTokenFromGenerationConfig) {
  // A copy of the demo model whose generation_config names the model's own first greedy token as a stop token.
  const GenerateResult free_run = demo_engine().generate(text_request("Hi", 6));
  const int32_t first = free_run.generated_ids[0];
  test::TempDir dir;
  const auto src = test::resource_dir() / "models" / "demo-tiny";
  for (const auto& entry : std::filesystem::directory_iterator(src))
    if (entry.path().filename() != "generation_config.json")
      std::filesystem::create_symlink(entry.path(), dir / entry.path().filename().string());
  test::write_bytes(dir / "generation_config.json", "{\"eos_token_id\": [" + std::to_string(first) + "]}");
  const auto engine = Engine::load(dir.path(), {"cpu"});
  GenerateRequest r = text_request("Hi", 6);
  r.ignore_eos = false;
  const GenerateResult stopped = engine->generate(r);
  EXPECT_EQ(stopped.stop_reason, "eos");
  EXPECT_EQ(stopped.generated_ids, std::vector<int32_t>{first});
}

TEST(Engine, BadRequestsFailClearlyAndTheEngineStaysUsable) {
  auto expect_error = [](const GenerateRequest& r, const std::string& fragment) {
    try {
      demo_engine().generate(r);
      FAIL() << "accepted; expected an error containing " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  GenerateRequest long_prompt = text_request(std::string(40000, 'x') + " " + std::string(40000, 'y'), 10);
  long_prompt.messages[0].content[0].text.clear();
  for (int i = 0; i < 33000; ++i) long_prompt.messages[0].content[0].text += " hello";
  expect_error(long_prompt, "over the context limit");
  GenerateRequest missing_image = text_request("What is this?", 4);
  missing_image.messages[0].content.insert(missing_image.messages[0].content.begin(), ContentItem::image());
  expect_error(missing_image, "1 images but 0 were given");
  GenerateRequest thin_image = missing_image;
  thin_image.images.push_back(RgbImage{2, 500, std::vector<uint8_t>(2 * 500 * 3, 9)});
  expect_error(thin_image, "aspect ratio");
  expect_error(text_request("x", 0), "max_new_tokens");
  // 2^63 - 1 new tokens once wrapped the context sum negative ("negative dimension in shape").
  expect_error(text_request("x", INT64_MAX), "max_new_tokens 9223372036854775807 is over the context limit");
  // Still usable afterwards.
  EXPECT_EQ(demo_engine().generate(text_request("Still there?", 3)).generated_ids.size(), 3u);
}

// An answer length that is a ceiling (an API request naming none) is cut to what the context leaves after the prompt:
// the same tokens as asking for exactly that many, where the length as a demand is refused.
TEST(Engine, AnAnswerThatFitsTheContextIsCutToItsRoom) {
  EngineOptions options{"cpu"};
  options.max_context = 40;
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", options);
  GenerateRequest ceiling = text_request("Describe the picture in detail, please.", 40);
  EXPECT_THROW(engine->generate(ceiling), Error);
  ceiling.answer_fits_context = true;
  const GenerateResult fitted = engine->generate(ceiling);
  const auto room = int64_t(40 - fitted.prompt_ids.size());
  ASSERT_GE(room, 1);
  EXPECT_EQ(int64_t(fitted.generated_ids.size()), room);
  const GenerateResult exact = engine->generate(text_request("Describe the picture in detail, please.", room));
  EXPECT_EQ(fitted.generated_ids, exact.generated_ids);
  // A ceiling past the context itself (qvl generate's default of 256 under --max-context 40) is cut the same way.
  for (const int64_t past : {int64_t(256), INT64_MAX}) {
    ceiling.max_new_tokens = past;
    EXPECT_EQ(engine->generate(ceiling).generated_ids, fitted.generated_ids) << past;
  }
}

// The long-context attention window (block-sparse prefill): covering every block of the prompt it gives the dense
// logits exactly; narrower, the prefill skips blocks and the logits move (an approximation, still an answer).
TEST(Engine, AnAttentionWindowCoveringThePromptGivesTheDenseAnswer) {
  std::string words;
  for (int i = 0; i < 60; ++i) words += " shapes and colours";  // about 190 tokens: three blocks of 64
  GenerateRequest r = text_request("Say it back:" + words, 4);
  r.keep_step_logits = true;
  std::vector<std::string> devices{"cpu"};
  if (cuda_plugin().usable) devices.push_back("cuda");
  else std::printf("[ note ] the CUDA half of this test is skipped: %s\n", cuda_plugin().reason.c_str());
  for (const std::string& device : devices) {
    SCOPED_TRACE(device);
    EngineOptions options{device};
    const GenerateResult dense = Engine::load(test::resource_dir() / "models" / "demo-tiny", options)->generate(r);
    ASSERT_GT(dense.prompt_ids.size(), 128u);
    options.attention_window = {4, 1};
    const GenerateResult covered = Engine::load(test::resource_dir() / "models" / "demo-tiny", options)->generate(r);
    EXPECT_EQ(covered.first_step_logits, dense.first_step_logits);
    EXPECT_EQ(covered.generated_ids, dense.generated_ids);
    options.attention_window = {1, 0};
    const GenerateResult narrow = Engine::load(test::resource_dir() / "models" / "demo-tiny", options)->generate(r);
    const OutputDifference d = compare_logits(dense.first_step_logits, narrow.first_step_logits);
    EXPECT_GT(d.relative_l2, 1e-4);  // the window is in force
    EXPECT_TRUE(std::all_of(narrow.first_step_logits.begin(), narrow.first_step_logits.end(),
                            [](float v) { return std::isfinite(v); }));
    EXPECT_EQ(narrow.generated_ids.size(), 4u);
  }
  EngineOptions negative{"cpu"};
  negative.attention_window = {-1, 1};
  EXPECT_THROW(Engine::load(test::resource_dir() / "models" / "demo-tiny", negative), Error);  // refused at load
}

TEST(Engine, RefusesAnUnknownOrUnavailableDevice) {
  EXPECT_THROW(Engine::load(test::resource_dir() / "models" / "demo-tiny", {"tpu"}), Error);
  const auto automatic = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"auto"});
  if (cuda_plugin().usable) {
    EXPECT_EQ(Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cuda"})->device(), "cuda");
    EXPECT_EQ(automatic->device(), "cuda");
    EXPECT_TRUE(automatic->fallback_reason().empty());
    return;
  }
  try {
    Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cuda"});
    FAIL() << "--device cuda must fail without a usable GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA is not available"), std::string::npos) << e.what();
  }
  EXPECT_EQ(automatic->device(), "cpu");
  EXPECT_EQ(automatic->fallback_reason(), cuda_plugin().reason);  // says why CUDA was not used
  // Where no NVIDIA kernel module is loaded (no GPU), the reason says so rather than sending the user to update a
  // driver because of a CUDA library's version (a trial on a machine with libcuda and no GPU was told to).
  if (!std::filesystem::exists("/proc/driver/nvidia/version")) {
    EXPECT_EQ(cuda_plugin().reason.find("update the driver"), std::string::npos) << cuda_plugin().reason;
  }
}

TEST(Engine, FallsBackOrExplainsWhenTheGpuCannotHoldTheModel) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  EngineOptions tiny_card{"auto"};
  tiny_card.device_memory_limit = 4 << 20;  // the demo model needs ~21 MB: pretend the card has 4 MB
  const auto automatic = Engine::load(test::resource_dir() / "models" / "demo-tiny", tiny_card);
  EXPECT_EQ(automatic->device(), "cpu");
  EXPECT_NE(automatic->fallback_reason().find("below the smallest plan"), std::string::npos) << automatic->fallback_reason();
  EXPECT_EQ(automatic->generate(text_request("Still works?", 2)).generated_ids.size(), 2u);
  tiny_card.device = "cuda";
  try {
    Engine::load(test::resource_dir() / "models" / "demo-tiny", tiny_card);
    FAIL() << "--device cuda loaded a model larger than the capped pool";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("budget of 4.0 MiB"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
}

double relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

// A budget too small for the whole model: the plan keeps the first layers on the GPU and runs the rest, the head and
// the vision tower on the CPU. The answer is the unbudgeted GPU's (the demo model's margins are clear), its logits no
// further from the GPU's than the CPU's own are, and replayed decode steps (the hidden state written into the
// recorded step) give what launched ones do.
TEST(Engine, APartialOffloadAnswersAsTheWholeGpuDoes) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  const auto dir = test::resource_dir() / "models" / "demo-tiny";
  GenerateRequest request = text_request("What shapes do you see?", 8);
  request.messages[0].content.insert(request.messages[0].content.begin(), ContentItem::image());
  request.images.push_back(load_image(test::resource_dir() / "samples" / "scene-1.png"));
  request.keep_step_logits = true;
  const GenerateResult whole = Engine::load(dir, {"cuda"})->generate(request);
  const GenerateResult cpu = Engine::load(dir, {"cpu"})->generate(request);
  const double cpu_difference = relative_difference(cpu.first_step_logits, whole.first_step_logits);
  bool saw_layers_on_both = false, saw_head_alone = false;
  for (int64_t mib = 6; mib <= 40; ++mib) {
    EngineOptions small_card{"cuda"};
    small_card.device_memory_limit = std::size_t(mib) << 20;
    small_card.plan_context = 8192;  // the demo model's layers are small: a long context's cache makes them split
    std::unique_ptr<Engine> engine;
    try {
      engine = Engine::load(dir, small_card);
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find("below the smallest plan"), std::string::npos) << e.what();
      continue;  // a budget under the first layer's: the smallest ones
    }
    ASSERT_TRUE(engine->memory_plan());
    const MemoryPlan plan = *engine->memory_plan();
    const bool layers_on_both = plan.gpu_layers < plan.layers, head_alone = plan.decoder_split() && !layers_on_both;
    if ((!layers_on_both || saw_layers_on_both) && (!head_alone || saw_head_alone)) continue;  // one budget of each
    saw_layers_on_both |= layers_on_both;
    saw_head_alone |= head_alone;
    const GenerateResult split = engine->generate(request);
    EXPECT_EQ(split.generated_ids, whole.generated_ids) << plan.summary();
    EXPECT_LE(relative_difference(split.first_step_logits, whole.first_step_logits), 1.5 * cpu_difference + 1e-4)
        << plan.summary() << "; the CPU alone differs by " << cpu_difference;
    // The plan's count, not only the budget the pool enforces anyway: the pool's peak is within the planned peak.
    const MemoryReport pool = engine->memory_report();
    EXPECT_LE(pool.reserved_peak, int64_t(plan.gpu_peak)) << plan.summary();
    EngineOptions launched = small_card;
    launched.cuda_graphs = false;
    const GenerateResult unrecorded = Engine::load(dir, launched)->generate(request);
    EXPECT_EQ(unrecorded.generated_ids, split.generated_ids) << plan.summary();
    EXPECT_LT(relative_difference(unrecorded.last_step_logits, split.last_step_logits), 1e-6) << plan.summary();
    // The head on the CPU picks from the host's copy of it (the plan's CPU part, where the host had room): the same
    // tokens as every logit gives, and a step's bytes count the copy.
    GenerateRequest picked = request;
    picked.keep_step_logits = false;
    EXPECT_EQ(engine->generate(picked).generated_ids, split.generated_ids) << plan.summary();
    const bool host_copy = std::any_of(plan.parts.begin(), plan.parts.end(), [](const PlannedPart& p) {
      return !p.on_gpu && p.name.starts_with("output head's bounds copy");
    });
    EXPECT_EQ(host_copy, !plan.head_on_gpu && cpu::room_for_copy(head_bounds_bytes(151936, 64)) && cpu::bound_rows())
        << plan.summary();
    EXPECT_EQ(engine->decode_weight_bytes(&picked) < engine->decode_weight_bytes(nullptr), host_copy) << plan.summary();
  }
  EXPECT_TRUE(saw_layers_on_both) << "no budget from 6 to 40 MiB split the decoder's layers";
  EXPECT_TRUE(saw_head_alone) << "no budget from 6 to 40 MiB left only the head on the CPU";
  // Planned for a context shorter than the prompt: the prefill runs in chunks of it, through the GPU's layers and
  // the head on the CPU, and gives the same answer.
  EngineOptions chunked{"cuda"};
  chunked.device_memory_limit = std::size_t(8) << 20;
  chunked.plan_context = 32;
  const auto engine = Engine::load(dir, chunked);
  ASSERT_TRUE(engine->memory_plan());
  const MemoryPlan plan = *engine->memory_plan();
  ASSERT_LT(plan.prefill_chunk, int64_t(whole.prompt_ids.size())) << plan.summary();
  EXPECT_TRUE(plan.decoder_split()) << plan.summary();
  EXPECT_EQ(engine->generate(request).generated_ids, whole.generated_ids) << plan.summary();
  EXPECT_LE(engine->memory_report().reserved_peak, int64_t(plan.gpu_peak)) << plan.summary();
}

TEST(Engine, AutoWeightsOnTheCpuAreAsStored) {
  EngineOptions options{"cpu"};
  options.weights = "auto";
  EXPECT_EQ(Engine::load(test::resource_dir() / "models" / "demo-tiny", options)->weights(), "bf16");
  options.weights = "q5";
  EXPECT_THROW(Engine::load(test::resource_dir() / "models" / "demo-tiny", options), Error);
}

TEST(Engine, SwitchesDevicesBetweenRequests) {
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  const GenerateResult on_cpu = engine->generate(text_request("Switch me.", 6));
  if (!cuda_plugin().usable) {
    EXPECT_THROW(engine->set_device("cuda"), Error);
    EXPECT_EQ(engine->device(), "cpu");  // a failed switch leaves the model where it was
  } else {
    engine->set_device("cuda");
    EXPECT_EQ(engine->device(), "cuda");
    EXPECT_EQ(engine->generate(text_request("Switch me.", 6)).generated_ids.size(), 6u);
  }
  engine->set_device("cpu");
  EXPECT_EQ(engine->device(), "cpu");
  EXPECT_EQ(engine->generate(text_request("Switch me.", 6)).generated_ids, on_cpu.generated_ids);
}

TEST(Engine, AGpuThatFailsToInitialiseFallsBackOrFailsClearly) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  setenv("QVL_CUDA_FAIL_INIT", "1", 1);
  const auto automatic = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"auto"});
  EXPECT_EQ(automatic->device(), "cpu");
  EXPECT_NE(automatic->fallback_reason().find("initialisation failed"), std::string::npos) << automatic->fallback_reason();
  EXPECT_EQ(automatic->generate(text_request("Still works?", 2)).generated_ids.size(), 2u);
  try {
    Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cuda"});
    ADD_FAILURE() << "--device cuda started with a failing GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("initialisation failed"), std::string::npos) << e.what();
  }
  unsetenv("QVL_CUDA_FAIL_INIT");
}

// Greedy decoding picks on the backend (the decode steps hand back 16 bytes, not the logits), and sampling at the
// models' default settings (temperature 0.7, top-k 20, top-p 0.8) finds top-k's candidates there on a GPU (the CPU
// samples its own logits in place); either gives the
// tokens the host gives from the logits (a request that keeps the step logits samples on the host). Sent again in one
// conversation, the prompt's last token is a one-token prefill pass (its logits for the first token), then the decode
// steps pick: on a GPU both replay one recording (tests/model/decode_recording_test.cpp counts them).
TEST(Engine, PicksOnTheBackendGiveTheHostsTokens) {
  std::vector<std::string> devices{"cpu"};
  if (cuda_plugin().usable) devices.push_back("cuda");
  else std::printf("[ note ] the CUDA half of this test is skipped: %s\n", cuda_plugin().reason.c_str());
  SamplingOptions sampled;
  sampled.temperature = 0.7, sampled.top_k = 20, sampled.top_p = 0.8, sampled.seed = 5;
  for (const std::string& device : devices)
    for (const SamplingOptions& sampling : {SamplingOptions{}, sampled}) {
      SCOPED_TRACE(device + (sampling.temperature > 0 ? ", sampled" : ", greedy"));
      const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", EngineOptions{device});
      GenerateRequest on_backend = text_request("Pick, please.", 24);
      on_backend.sampling = sampling;
      on_backend.ignore_eos = true;
      GenerateRequest on_host = on_backend;
      on_host.keep_step_logits = true;
      const GenerateResult a = engine->generate(on_backend), b = engine->generate(on_host);
      ASSERT_EQ(a.generated_ids.size(), 24u);
      EXPECT_EQ(a.generated_ids, b.generated_ids);
      on_backend.conversation_id = on_host.conversation_id = "one chat";
      EXPECT_EQ(engine->generate(on_host).generated_ids, b.generated_ids);
      EXPECT_EQ(engine->generate(on_backend).generated_ids, a.generated_ids);  // the same turn again
    }
  // Greedy, then sampled, in one kept conversation: the recorded step is recorded again with the other pick.
  for (const std::string& device : devices) {
    SCOPED_TRACE(device + ", greedy then sampled in one conversation");
    const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", EngineOptions{device});
    GenerateRequest on_backend = text_request("Pick, please.", 12);
    on_backend.ignore_eos = true;
    on_backend.conversation_id = "on the backend";
    GenerateRequest on_host = on_backend;
    on_host.keep_step_logits = true;
    on_host.conversation_id = "on the host";
    EXPECT_EQ(engine->generate(on_backend).generated_ids, engine->generate(on_host).generated_ids);
    on_backend.sampling = on_host.sampling = sampled;
    EXPECT_EQ(engine->generate(on_backend).generated_ids, engine->generate(on_host).generated_ids);
  }
}

// On the CPU a decode step picks from the output head's int8 bounds copy (backend/cpu/head_bounds.h; the test above
// checks its tokens against the host's over every logit): the kernel table shows it, a step's bytes count the copy
// instead of the head, and with the switch off the head's product runs, with the same tokens.
TEST(Engine, TheCpuPicksFromTheHeadsBoundsCopy) {
  const int64_t rows = 151936, width = 64;  // the demo model's head
  if (!cpu::room_for_copy(head_bounds_bytes(rows, width)) || !cpu::bound_rows())
    GTEST_SKIP() << "skipped: no copy of the head here (no room for its 10 MB with a quarter of the memory free, or "
                    "the plain C++ kernels: QVL_CPU_KERNELS=generic)";
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", EngineOptions{"cpu"});
  SamplingOptions sampled;
  sampled.temperature = 0.7, sampled.top_k = 20, sampled.top_p = 0.8, sampled.seed = 5;
  for (const SamplingOptions& sampling : {SamplingOptions{}, sampled}) {
    SCOPED_TRACE(sampling.temperature > 0 ? "sampled" : "greedy");
    GenerateRequest r = text_request("Pick, please.", 12);
    r.sampling = sampling;
    const auto run = [&](bool bounded) {
      Fusions fusions;
      fusions.bounded_head_pick = bounded;
      engine->set_fusions(fusions);
      auto profiler = std::make_shared<Profiler>();
      engine->set_profiler(profiler);
      const GenerateResult result = engine->generate(r);
      engine->set_profiler(nullptr);
      const auto kernels = profiler->summary();
      const bool ran = std::any_of(kernels.begin(), kernels.end(), [](const KernelSummary& k) { return k.name == "head bounds+pick"; });
      EXPECT_EQ(ran, bounded);
      return std::pair{result.generated_ids, engine->decode_weight_bytes(&r)};
    };
    const auto [bounded_ids, bounded_bytes] = run(true);
    const auto [every_ids, every_bytes] = run(false);
    EXPECT_EQ(bounded_ids, every_ids);
    EXPECT_EQ(every_bytes, engine->decode_weight_bytes(nullptr));
    // The bf16 head: 128 bytes a row, where the copy holds 64 and a scale.
    EXPECT_EQ(every_bytes - bounded_bytes, uint64_t(rows * width * 2) - head_bounds_bytes(rows, width));
  }
  engine->set_fusions({});
}

// Sampled decoding runs ahead on a GPU: the step for the next token is queued with the token drawn on the device
// (TextDecoder::queue_step). The host's draw decides. Where the device's token is not the host's, the queued step is
// dropped; where top-k's candidates did not fit, the step runs again for its logits. Both forced here (injected
// faults): every draw one random number late, every result "did not fit"; the tokens are the host's either way.
TEST(Engine, SampledDecodingAheadFallsBackToTheHostsDraws) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", EngineOptions{"cuda"});
  GenerateRequest request = text_request("Draw, please.", 20);
  request.sampling.temperature = 0.9, request.sampling.top_k = 40, request.sampling.top_p = 0.9;
  request.sampling.seed = 3;
  request.ignore_eos = true;
  GenerateRequest on_host = request;
  on_host.keep_step_logits = true;  // sampled on the host from the logits
  const std::vector<int32_t> expected = engine->generate(on_host).generated_ids;
  ASSERT_EQ(expected.size(), 20u);
  ASSERT_GT(std::set<int32_t>(expected.begin(), expected.end()).size(), 3u);  // draws, not one token throughout
  const GenerateResult ahead = engine->generate(request);
  EXPECT_EQ(ahead.generated_ids, expected);
  EXPECT_GE(ahead.timing.steps_ahead, 15);  // every step after the first two ran ahead
  EXPECT_EQ(ahead.timing.steps_redone, 0);
  for (const FaultInjection& fault : {FaultInjection{.draws_one_late = true}, FaultInjection{.candidates_do_not_fit = true}}) {
    SCOPED_TRACE(fault.draws_one_late ? "draws one late" : "candidates do not fit");
    engine->inject_fault(fault);  // recorded into each new request's step
    const GenerateResult faulty = engine->generate(request);
    engine->inject_fault({});
    EXPECT_EQ(faulty.generated_ids, expected);
    // The fallback taken: every step run again where nothing fits; a late draw, where it missed the host's token (on
    // the demo model's peaked answers it hits it often: 6 of 19 steps missed in one run).
    EXPECT_GE(faulty.timing.steps_redone, fault.candidates_do_not_fit ? 15 : 1);
  }
  EXPECT_EQ(engine->generate(request).generated_ids, expected);
}

TEST(Engine, ReplayedDecodeStepsGiveTheSameTokensAsLaunchedOnes) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  EngineOptions graphs{"cuda"}, launched{"cuda"};
  launched.cuda_graphs = false;
  const auto a = Engine::load(test::resource_dir() / "models" / "demo-tiny", graphs);
  const auto b = Engine::load(test::resource_dir() / "models" / "demo-tiny", launched);
  const GenerateResult ra = a->generate(text_request("Replay, please.", 16));
  EXPECT_EQ(ra.generated_ids, b->generate(text_request("Replay, please.", 16)).generated_ids);
  EXPECT_EQ(ra.generated_ids, a->generate(text_request("Replay, please.", 16)).generated_ids);  // a new cache, recorded anew
}

// Out of device memory at any allocation of a request — image preparation, vision tower, prefill, recording of the
// decode step, decode — fails that request with the pool's numbers, leaves the pool as it was (nothing leaked, no
// capture left open) and the next request gives the same answer as before.
TEST(Engine, AnOutOfMemoryAtAnyAllocationFailsOnlyThatRequest) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  EngineOptions options{"cuda"};
  options.vision_cache_bytes = 0;  // every request prepares and encodes its picture (kept, the tower would run once)
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", options);
  GenerateRequest request = text_request("What is in the picture?", 6);
  request.messages[0].content.insert(request.messages[0].content.begin(), ContentItem::image());
  request.images.push_back(load_image(test::resource_dir() / "samples" / "scene-1.png"));
  // The picture's size seen once: its tower op by op, recorded after the answer (RecordedVisionTower); from then on
  // replayed. Changing the fusions forgets the recording.
  const GenerateResult reference = engine->generate(request);
  const auto forget_recording = [&] { engine->set_fusions(engine->fusions()); };
  const auto allocations_of_a_request = [&] {
    const MemoryReport before = engine->memory_report();
    engine->generate(request);
    return engine->memory_report().alloc_count - before.alloc_count;
  };
  // Each allocation of a request failed in turn (at most ~`most` requests, each after `prepare`): the request fails
  // with the pool's message, or, where `answered_after_recording`, it may answer once the failure is in the recording
  // after its answer (then every later allocation is in it too, and nothing is held); every block it took returns
  // (`prepare` brings the engine back to `idle`), and the answer is still the same now and then.
  const auto fail_each = [&](const char* which, const std::function<void()>& prepare, bool answered_after_recording,
                             int64_t most) {
    prepare();
    const MemoryReport idle = engine->memory_report();
    const int64_t allocations = allocations_of_a_request();
    ASSERT_GT(allocations, 10) << which;
    const int64_t stride = std::max<int64_t>(1, allocations / most);
    int failed = 0, answered = 0;
    for (int64_t nth = 1; nth <= allocations; nth += stride) {
      SCOPED_TRACE(std::string(which) + ": allocation " + std::to_string(nth) + " of " + std::to_string(allocations));
      prepare();
      engine->inject_fault({.out_of_memory_at = nth});
      try {
        EXPECT_EQ(engine->generate(request).generated_ids, reference.generated_ids);
        ++answered;
        EXPECT_TRUE(answered_after_recording) << "the injected out-of-memory did not fail the request";
        EXPECT_EQ(engine->vision_cache().recorded_tower_bytes, 0u) << "a failed recording is not held";
      } catch (const std::exception& e) {
        EXPECT_EQ(answered, 0) << "a failure before one that answered: the recording is the request's last work";
        EXPECT_NE(std::string(e.what()).find("out of device memory (injected"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("MiB allocated"), std::string::npos) << e.what();
        ++failed;
      }
      engine->inject_fault({});
      prepare();
      EXPECT_EQ(engine->memory_report().allocated, idle.allocated);  // every block of the request returned
      EXPECT_EQ(engine->device_error(), "");
      if (nth % (stride * 20) == 1 || nth + stride > allocations) {  // the answer is still the same now and then
        EXPECT_EQ(engine->generate(request).generated_ids, reference.generated_ids);
        prepare();
      }
    }
    EXPECT_GT(failed, 0) << which;
    if (answered_after_recording) {
      EXPECT_GT(answered, 0) << which << ": no allocation was the recording's";
    }
    std::printf("%s: %d requests failed and %d answered with an injected out-of-memory, one per %lld of %lld "
                "allocations\n", which, failed, answered, (long long)stride, (long long)allocations);
  };
  // Requests replaying the recorded tower (its buffers stay: idle counts them).
  fail_each("replaying the tower", [] {}, false, 400);
  // A request whose tower goes op by op and is recorded after its answer.
  fail_each("recording the tower", forget_recording, true, 200);
}

// A kernel fault poisons the CUDA context for the rest of the process, so the scenario runs in a child process
// (a death test re-executes this binary) and reports through its exit code and stderr.
void fault_during_generation_scenario() {
  // Inside the first decode step's products (4 layers of q+k+v, o, gate/up and down, then the head: 17, that step
  // recorded, the later ones replaying it and counting nothing), past the prefill's: 17 on the native profile (q+k+v
  // and gate+up packed), 29 on the SM61 one, so the step holds the 32nd on both (18-34, 30-46). The request dies
  // while tokens are streaming: its prompt has run.
  setenv("QVL_CUDA_FAULT_AT_LINEAR", "32", 1);
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cuda"});
  unsetenv("QVL_CUDA_FAULT_AT_LINEAR");
  struct PromptDone : TokenSink {
    int prompts = 0;
    void on_token(int32_t, const std::string&) override {}
    void on_prompt_done(const GenerateTiming&) override { ++prompts; }
  };
  const auto expect_error = [&](const char* needle, int prompts_done) {
    PromptDone sink;
    try {
      engine->generate(text_request("Fault, please.", 8), &sink);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      if (std::string(e.what()).find(needle) != std::string::npos && sink.prompts == prompts_done) return;
    }
    std::fprintf(stderr, "expected an error with '%s' after %d prompt(s) ran, %d ran\n", needle, prompts_done,
                 sink.prompts);
    std::exit(1);
  };
  expect_error("the GPU failed during generation", 1);
  expect_error("the GPU failed earlier", 0);  // and fails fast afterwards
  engine->set_device("cpu");               // the user switches to the CPU: the same engine answers again
  const GenerateResult r = engine->generate(text_request("Fault, please.", 8));
  const auto cpu = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  if (r.generated_ids != cpu->generate(text_request("Fault, please.", 8)).generated_ids) std::exit(2);
  try {
    engine->set_device("cuda");
    std::exit(3);
  } catch (const Error& e) {
    std::fprintf(stderr, "cuda again: %s\n", e.what());
  }
  std::fprintf(stderr, "scenario done\n");
  std::exit(0);
}

// A device lost between two requests (reset, fallen off the bus): the next request fails naming the GPU's error,
// and the CPU answers as before. In a child process, like the kernel fault.
void device_lost_between_requests_scenario() {
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cuda"});
  engine->generate(text_request("Still there?", 6));
  engine->inject_fault({.lose_device = true});
  try {
    engine->generate(text_request("Still there?", 6));
    std::exit(1);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  engine->set_device("cpu");
  const auto cpu = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  if (engine->generate(text_request("Still there?", 6)).generated_ids != cpu->generate(text_request("Still there?", 6)).generated_ids)
    std::exit(2);
  std::fprintf(stderr, "scenario done\n");
  std::exit(0);
}

TEST(Engine, ADeviceLostBetweenRequestsFailsTheNextAndTheCpuTakesOver) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(device_lost_between_requests_scenario(), ::testing::ExitedWithCode(0),
              "error: the GPU failed during generation: cuda.*scenario done");
}

TEST(Engine, AKernelFaultFailsTheRequestAndTheCpuTakesOver) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: CUDA does not survive fork()
  EXPECT_EXIT(fault_during_generation_scenario(), ::testing::ExitedWithCode(0),
              "error: the GPU failed during generation: cuda.*error: the GPU failed earlier.*cuda again: .*scenario done");
}

}  // namespace
}  // namespace qvl
