// Per-kernel timing: aggregation (ranking, percentiles, achieved rates), the Chrome trace, listeners during
// generation, and that an engine without a profiler records nothing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cpu/head_bounds.h"
#include "backend/cpu/huge_pages.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"
#include "test_support.h"

namespace qvl {
namespace {

TEST(Profiler, AggregatesPerKernelRankedByTotalTime) {
  Profiler p;
  for (int i = 1; i <= 100; ++i) p.record({"linear 8x8 f32", double(i), double(i) * 1e-3, 2e6, 4e9});  // 1..100 us
  p.record({"rms_norm 8", 0.0, 0.5, 1e6, 0});
  const auto table = p.summary();
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[0].name, "linear 8x8 f32");  // 100 calls, 5.05 ms in all, rank above one 0.5 ms call
  EXPECT_GT(table[0].total_ms, table[1].total_ms);
  const auto& lin = table[0].name == "linear 8x8 f32" ? table[0] : table[1];
  EXPECT_EQ(lin.calls, 100);
  EXPECT_NEAR(lin.total_ms, 5.05, 1e-9);
  EXPECT_NEAR(lin.mean_us, 50.5, 1e-6);
  EXPECT_NEAR(lin.p50_us, 51, 1.0);
  EXPECT_NEAR(lin.p95_us, 95, 1.0);
  EXPECT_NEAR(lin.gb_per_s, 100 * 2e6 / 5.05e-3 / 1e9, 1e-6);
  EXPECT_NEAR(lin.tflop_per_s, 100 * 4e9 / 5.05e-3 / 1e12, 1e-6);
  EXPECT_NEAR(table[0].share + table[1].share, 1.0, 1e-12);
  const auto trace = nlohmann::json::parse(p.chrome_trace());
  ASSERT_EQ(trace["traceEvents"].size(), 101u);
  EXPECT_EQ(trace["traceEvents"][0]["ph"], "X");
  EXPECT_DOUBLE_EQ(trace["traceEvents"][0]["dur"].get<double>(), 1.0);  // microseconds
  p.clear();
  EXPECT_TRUE(p.summary().empty());
}

TEST(Profiler, SeesEveryOpOfAGenerationAndUpdatesListenersPerToken) {
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  auto profiler = std::make_shared<Profiler>();
  int updates = 0;
  profiler->add_listener([&](const std::vector<KernelSummary>& table) {
    ++updates;
    EXPECT_FALSE(table.empty());
  });
  engine->set_profiler(profiler);
  GenerateRequest r;
  r.messages = {ChatMessage::text("user", "Hi")};
  r.max_new_tokens = 5;
  r.ignore_eos = true;
  engine->generate(r);
  EXPECT_EQ(updates, 6);  // one per token and one at the end
  int64_t linear_calls = 0, attention_calls = 0, bounded_heads = 0;
  for (const auto& k : profiler->summary()) {
    if (k.name.rfind("linear", 0) == 0) linear_calls += k.calls;
    if (k.name.rfind("attention", 0) == 0) attention_calls += k.calls;
    if (k.name == "head bounds+pick") bounded_heads += k.calls;
    EXPECT_GE(k.total_ms, 0.0);
  }
  // demo-tiny: 4 layers x 4 products (q+k+v in one, o, gate/up + SwiGLU in one, down: the CPU's fused loops), for
  // the prefill and 4 decode steps; the head's product after the prefill, and in the decode steps its bounded pick
  // (where the machine had room for the head's copy and SIMD kernels) or its product.
  const bool copy = cpu::room_for_copy(head_bounds_bytes(151936, 64)) && cpu::bound_rows();
  EXPECT_EQ(linear_calls, 5 * 4 * 4 + (copy ? 1 : 5));
  EXPECT_EQ(bounded_heads, copy ? 4 : 0);
  EXPECT_EQ(attention_calls, 5 * 4);

  engine->set_profiler(nullptr);
  profiler->clear();
  engine->generate(r);
  EXPECT_TRUE(profiler->events().empty());  // off: nothing recorded
}

}  // namespace
}  // namespace qvl
