// The memory plan: bytes counted independently from the shapes and formats, the order in which parts leave the GPU
// as the budget shrinks, the peak within the budget, and a clear error when nothing fits.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "io/random_model.h"
#include "runtime/engine.h"
#include "runtime/memory_plan.h"
#include "test_support.h"

namespace qvl {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

MemoryPlanRequest q4_on_pascal(uint64_t budget_mib) {
  MemoryPlanRequest r;
  r.budget = budget_mib * kMiB;
  r.context = 2048;
  r.image_tokens = 1024;
  r.formats = QuantizationConfig{WeightFormat::Q4, 32, WeightFormat::Q8};
  r.gpu_floats = DType::F16;  // the SM61 profile: f16 weights, and its tiled GEMM reads f32 rows (no 16-bit operands)
  r.gpu_narrows_product_inputs = false;
  return r;
}

// The 16-bit operands cuBLAS reads (the SwiGLU's and GELU's slots beside the widest conversion) are counted where
// the GPU's products read them, and only there.
TEST(MemoryPlan, CountsSixteenBitOperandsWhereTheProductsReadThem) {
  const ModelConfig c = model_preset("qwen3-vl-2b");
  MemoryPlanRequest pascal = q4_on_pascal(1 << 20), native = pascal;
  native.gpu_narrows_product_inputs = true;
  native.gpu_floats = DType::BF16;
  const MemoryPlan a = plan_memory(c, pascal), b = plan_memory(c, native);
  ASSERT_TRUE(a.vision_on_gpu && b.vision_on_gpu);
  const TextConfig& t = c.text;
  const VisionConfig& v = c.vision;
  const uint64_t chunk = uint64_t(a.prefill_chunk), q = uint64_t(t.num_attention_heads * t.head_dim),
                 kv = uint64_t(t.num_key_value_heads * t.head_dim), inter = uint64_t(t.intermediate_size);
  // Quantised matrices: the SwiGLU's operand and, wider than the attention's, the f32 result of q, k and v as one
  // product (widened together first: gate and up's 2 x 6,144 x 2,048 bf16 take what SM61's f32 6,144 x 2,048 does).
  const uint64_t decoder = 2 * chunk * inter + 4 * chunk * (q + 2 * kv);
  const uint64_t vision_per_patch = 2 * uint64_t(v.intermediate_size + std::max(2 * v.hidden_size, v.patch_dim()));
  const uint64_t merge = uint64_t(v.spatial_merge_size * v.spatial_merge_size);
  EXPECT_EQ(b.prefill_base - a.prefill_base, decoder);
  EXPECT_EQ(b.vision_pass_per_token - a.vision_pass_per_token, vision_per_patch * merge);
  // bf16 matrices: q, k and v run as one product whose f32 result (wider than the attention's operand) waits for its
  // split beside the SwiGLU's operand.
  MemoryPlanRequest pascal_bf16 = pascal, native_bf16 = native;
  pascal_bf16.formats = native_bf16.formats = std::nullopt;
  pascal_bf16.gpu_floats = DType::F16;
  native_bf16.gpu_floats = DType::BF16;
  const MemoryPlan fa = plan_memory(c, pascal_bf16), fb = plan_memory(c, native_bf16);
  ASSERT_EQ(fa.prefill_chunk, fb.prefill_chunk);
  const uint64_t fchunk = uint64_t(fa.prefill_chunk);
  EXPECT_EQ(fb.prefill_base - fa.prefill_base, 2 * fchunk * inter + 4 * fchunk * (q + 2 * kv));
}

uint64_t gpu_bytes(const MemoryPlan& plan) {
  uint64_t sum = 0;
  for (const PlannedPart& p : plan.parts) sum += p.on_gpu ? p.bytes : 0;
  return sum;
}

const PlannedPart& part_starting(const MemoryPlan& plan, const std::string& prefix) {
  for (const PlannedPart& p : plan.parts)
    if (p.name.starts_with(prefix)) return p;
  throw std::runtime_error("no part " + prefix);
}

TEST(MemoryPlan, CountsTheDecoderAsTheFormatStoresIt) {
  const ModelConfig c = model_preset("qwen3-vl-2b");
  const MemoryPlan plan = plan_memory(c, q4_on_pascal(1 << 20));
  ASSERT_TRUE(plan.everything_on_gpu());
  // A q4 row of k values: k/32 blocks of 16 bytes and one f16 scale each; four 16-bit norm vectors per layer.
  const auto q4 = [](int64_t rows, int64_t k) { return uint64_t(rows) * uint64_t(k / 32) * (16 + 2); };
  const int64_t h = c.text.hidden_size, i = c.text.intermediate_size, q = c.text.num_attention_heads * c.text.head_dim,
                kv = c.text.num_key_value_heads * c.text.head_dim;
  const uint64_t layer = q4(q, h) + 2 * q4(kv, h) + q4(h, q) + 2 * q4(i, h) + q4(h, i) +
                         2 * uint64_t(2 * h + 2 * c.text.head_dim);
  const uint64_t counted = part_starting(plan, "decoder layers").bytes;
  const uint64_t expected = layer * uint64_t(c.text.num_hidden_layers);
  EXPECT_GE(counted, expected);                                     // rounded up to the pool's blocks...
  EXPECT_LE(counted - expected, uint64_t(c.text.num_hidden_layers) * 18 * 512);  // ...by under 512 B a tensor
  // The KV cache: keys and values of every layer, bf16 (a bf16 checkpoint's by default), for the planned context, each its own
  // pool block: 2,048 x 1,024 x 2 = 4 MiB, five to a 20 MiB segment (56 blocks in 12 segments, where the raw bytes
  // are 224 MiB; in f32 they were 448 MiB in 28 segments).
  ASSERT_EQ(q4_on_pascal(1).kv_cache, DType::BF16);
  ASSERT_EQ(uint64_t(kv * 2 * 2048), 4 * kMiB);
  EXPECT_EQ(part_starting(plan, "kv cache").bytes, uint64_t(12) * 20 * kMiB);
  MemoryPlanRequest f32_cache = q4_on_pascal(1 << 20);
  f32_cache.kv_cache = DType::F32;
  EXPECT_EQ(part_starting(plan_memory(c, f32_cache), "kv cache").bytes, uint64_t(c.text.num_hidden_layers) * 20 * kMiB);
  // The parts add up to the peak, none of them negative (the activations are what the peak holds beyond the rest).
  EXPECT_EQ(gpu_bytes(plan), plan.gpu_peak);
  for (const PlannedPart& p : plan.parts) EXPECT_LT(p.bytes, plan.gpu_peak) << p.name;
}

TEST(MemoryPlan, MovesTheVisionTowerFirstThenTheLastLayers) {
  const ModelConfig c = model_preset("qwen3-vl-2b");
  const MemoryPlan everything = plan_memory(c, q4_on_pascal(1 << 20));
  int64_t last_layers = c.text.num_hidden_layers;
  bool saw_vision_only = false, saw_split = false;
  for (uint64_t mib = everything.gpu_peak / kMiB + 1; mib >= 400; mib -= 25) {
    const MemoryPlan plan = plan_memory(c, q4_on_pascal(mib));
    EXPECT_LE(plan.gpu_peak, plan.budget) << mib;
    EXPECT_LE(plan.gpu_layers, last_layers) << mib;  // a smaller budget never holds more layers
    last_layers = plan.gpu_layers;
    if (plan.decoder_split()) {
      saw_split = true;
      EXPECT_FALSE(plan.vision_on_gpu) << "the vision tower leaves before any decoder layer";
      EXPECT_FALSE(plan.head_on_gpu);
      EXPECT_GE(plan.gpu_layers, 1);
      EXPECT_TRUE(plan.prefill_chunk == 512 || plan.prefill_chunk == plan.context) << plan.prefill_chunk;
    } else if (!plan.vision_on_gpu) {
      saw_vision_only = true;
    }
    // The room reported is real: a KV cache of that many tokens, placed as the pool places it, fits beside the rest.
    const auto cache = [&](int64_t tokens) { return kv_cache_pool_bytes(c.text, plan.gpu_layers, tokens, q4_on_pascal(1).kv_cache); };
    EXPECT_GE(plan.context_room, plan.context);
    EXPECT_LE(plan.gpu_peak + cache(plan.context_room) - cache(plan.context), plan.budget) << mib;
    // ...and it is not given away: within a pool segment's worth of tokens of what the raw bytes would allow.
    const uint64_t per_token = kv_bytes_per_token(c.text, plan.gpu_layers, q4_on_pascal(1).kv_cache);
    const int64_t raw_room = plan.context + int64_t((plan.budget - plan.gpu_peak) / per_token);
    EXPECT_GE(plan.context_room + int64_t(20 * kMiB / (per_token / uint64_t(2 * plan.gpu_layers))), raw_room) << mib;
  }
  EXPECT_TRUE(saw_vision_only);
  EXPECT_TRUE(saw_split);
  EXPECT_EQ(everything.prefill_chunk, 2048) << "a budget that fits it runs the whole planned context in one pass";
}

// The output head's bounds copy (Backend::prepare_head_pick): 151,936 x 2048 int8 values and an f32 scale per 128
// for the 2B's bf16 head, in the plan only beside everything else with the context asked for, and first to go.
TEST(MemoryPlan, PlansTheHeadsBoundsCopyOnlyBesideEverythingElse) {
  const ModelConfig c = model_preset("qwen3-vl-2b");
  EXPECT_EQ(head_bounds_bytes(c.text.vocab_size, c.text.hidden_size), uint64_t(151936) * (2048 + 16 * 4));
  EXPECT_EQ(head_bounds_bytes(100, 2050), 0u) << "a width that is no multiple of 16";
  EXPECT_EQ(head_bounds_bytes(100, 4112), 0u) << "wider than the bounds pass holds";
  MemoryPlanRequest r;
  r.context = 2048;
  r.image_tokens = 1024;
  r.head_bounds = head_bounds_bytes(c.text.vocab_size, c.text.hidden_size);
  r.budget = uint64_t(1) << 40;
  const MemoryPlan roomy = plan_memory(c, r);
  ASSERT_TRUE(roomy.everything_on_gpu());
  EXPECT_GE(roomy.head_bounds, r.head_bounds);
  EXPECT_LT(roomy.head_bounds, r.head_bounds + 2 * kMiB) << "one block, rounded as the pool rounds it";
  const auto part = [](const MemoryPlan& p) {
    uint64_t bytes = 0;
    for (const PlannedPart& q : p.parts) bytes += q.name.starts_with("output head's bounds copy") ? q.bytes : 0;
    return bytes;
  };
  EXPECT_EQ(part(roomy), roomy.head_bounds);
  MemoryPlanRequest without = r;
  without.head_bounds = 0;
  const MemoryPlan plain = plan_memory(c, without);
  EXPECT_EQ(plain.head_bounds, 0u);
  EXPECT_EQ(roomy.gpu_peak, plain.gpu_peak + roomy.head_bounds);
  // Just enough for everything without the copy: the same arrangement, no copy, the same peak.
  r.budget = plain.gpu_peak;
  const MemoryPlan tight = plan_memory(c, r);
  EXPECT_TRUE(tight.everything_on_gpu());
  EXPECT_EQ(tight.head_bounds, 0u);
  EXPECT_EQ(part(tight), 0u);
  EXPECT_LE(tight.gpu_peak, tight.budget);
  // The head off the GPU: no copy in the pool however much is asked for it; the CPU's in the host's memory.
  r.budget = 1024 * kMiB;
  const MemoryPlan split = plan_memory(c, r);
  ASSERT_FALSE(split.head_on_gpu);
  EXPECT_EQ(split.head_bounds, 0u);
  uint64_t host_copy = 0;
  for (const PlannedPart& q : split.parts)
    if (q.name.starts_with("output head's bounds copy")) host_copy += q.on_gpu ? 1 : q.bytes;
  EXPECT_EQ(host_copy, r.head_bounds);
  MemoryPlan split_dropped = split;
  split_dropped.drop_head_bounds();  // the host had no room for it
  EXPECT_EQ(part(split_dropped), 0u);
  EXPECT_EQ(split_dropped.gpu_peak, split.gpu_peak);
  // Dropped after all (the backend made none): the part goes, the plan's room stays.
  MemoryPlan dropped = roomy;
  dropped.drop_head_bounds();
  EXPECT_EQ(dropped.head_bounds, 0u);
  EXPECT_EQ(part(dropped), 0u);
  EXPECT_EQ(dropped.context_room, roomy.context_room);
  uint64_t parts = 0;
  for (const PlannedPart& p : dropped.parts) parts += p.on_gpu ? p.bytes : 0;
  EXPECT_EQ(parts, dropped.gpu_peak) << "the parts still add up to the peak";
}

TEST(MemoryPlan, LeavesRoomForSeveralImagesInOneVisionPassWhereTheBudgetAllows) {
  const ModelConfig c = model_preset("qwen3-vl-2b");
  MemoryPlanRequest r = q4_on_pascal(1 << 20);
  r.image_tokens = 1024;  // the largest image
  const MemoryPlan roomy = plan_memory(c, r);
  EXPECT_GT(roomy.image_room, 100 * 1024) << "a budget this large holds many images in one pass";
  // From a budget of exactly the planned peak up: the room never shrinks, and never drops below the largest image.
  int64_t last = 0;
  for (uint64_t extra = 0; extra <= 256; extra += 32) {
    r.budget = roomy.gpu_peak + extra * kMiB;
    const MemoryPlan p = plan_memory(c, r);
    ASSERT_TRUE(p.everything_on_gpu());
    EXPECT_GE(p.image_room, 1024) << extra;
    EXPECT_GE(p.image_room, last) << extra;
    EXPECT_LE(p.image_room, roomy.image_room) << extra;
    last = p.image_room;
  }
}

// What KV caches may hold beside a request's passes (the plan counts one cache, and the vision pass where the KV room
// is): the budget less each phase's peak without its cache.
TEST(MemoryPlan, SaysWhatCachesMayHoldBesideTheVisionPassAndThePrefill) {
  const ModelConfig c = model_preset("qwen3-vl-2b");
  MemoryPlanRequest r = q4_on_pascal(1 << 20);
  r.budget = plan_memory(c, r).gpu_peak;  // exactly the peak of everything on the GPU
  const MemoryPlan exact = plan_memory(c, r);
  ASSERT_TRUE(exact.everything_on_gpu());
  // The decoder phase is the peak here (2,048 tokens of cache, a 2,048-row pass, a 1,024-token image's features):
  // beside that prefill there is room for exactly the planned cache, counted as the pool places it.
  const uint64_t planned_cache = kv_cache_pool_bytes(c.text, c.text.num_hidden_layers, 2048, DType::BF16);
  EXPECT_EQ(exact.room_beside_prefill(1024), planned_cache);
  EXPECT_EQ(exact.room_beside_prefill(0) - exact.room_beside_prefill(1024),
            1024 * uint64_t(4 * c.text.hidden_size * (1 + c.vision.deepstack_visual_indexes.size())))
      << "a merged token's embedding and DeepStack features, f32";
  // The vision pass over that image: at most the peak, at least the weights and buffers on the GPU and the features.
  uint64_t weights_and_buffers = 0;
  for (const PlannedPart& p : exact.parts)
    if (p.on_gpu && !p.name.starts_with("kv cache") && !p.name.starts_with("activations")) weights_and_buffers += p.bytes;
  const uint64_t vision_phase = exact.budget - exact.room_beside_vision_pass(1024);
  EXPECT_LE(vision_phase, exact.gpu_peak);
  EXPECT_GE(vision_phase, weights_and_buffers + 1024 * uint64_t(4 * c.text.hidden_size * 4));
  // So a conversation holding the planned cache does not fit beside that pass, though the peak is the prefill's: the
  // pass evicts it, which the plan's KV room alone would not say.
  EXPECT_LT(exact.room_beside_vision_pass(1024), planned_cache);
  EXPECT_EQ(exact.room_beside_vision_pass(512) - exact.room_beside_vision_pass(1024), 512 * exact.vision_pass_per_token);
  // Both follow the budget byte for byte; a pass larger than the budget leaves none.
  r.budget += 100 * kMiB;
  const MemoryPlan more = plan_memory(c, r);
  EXPECT_EQ(more.room_beside_vision_pass(1024), exact.room_beside_vision_pass(1024) + 100 * kMiB);
  EXPECT_EQ(more.room_beside_prefill(1024), planned_cache + 100 * kMiB);
  EXPECT_EQ(exact.room_beside_vision_pass(int64_t(exact.budget / exact.vision_pass_per_token) + 1), 0u);
  // The tower on the CPU: a pass takes nothing from the pool.
  r.budget = exact.gpu_peak;
  MemoryPlan host_vision = exact;
  while (host_vision.vision_on_gpu) r.budget -= 16 * kMiB, host_vision = plan_memory(c, r);
  EXPECT_EQ(host_vision.room_beside_vision_pass(1024), r.budget);
}

TEST(MemoryPlan, ATwoGigabytePascalCardHoldsEveryDecoderLayerAtQ4) {
  // 2,048 MiB less a 200 MiB reserve for the display, the context and cuBLAS, which the pool does not see.
  const MemoryPlan plan = plan_memory(model_preset("qwen3-vl-2b"), q4_on_pascal(2048 - 200));
  EXPECT_EQ(plan.gpu_layers, plan.layers);
  EXPECT_TRUE(plan.head_on_gpu);
  EXPECT_LE(plan.gpu_peak, plan.budget);
  // bf16 weights do not: the decoder alone is 2.6 GiB.
  MemoryPlanRequest bf16 = q4_on_pascal(2048 - 200);
  bf16.formats.reset();
  EXPECT_TRUE(plan_memory(model_preset("qwen3-vl-2b"), bf16).decoder_split());
}

TEST(MemoryPlan, ABudgetBelowTheSmallestPlanNamesBothNumbers) {
  try {
    plan_memory(model_preset("qwen3-vl-2b"), q4_on_pascal(100));
    FAIL() << "a 100 MiB budget cannot hold a decoder layer, its cache and the activations";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("budget of 100.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("the smallest plan"), std::string::npos) << m;
    EXPECT_NE(m.find("everything on the GPU needs"), std::string::npos) << m;
  }
  MemoryPlanRequest none = q4_on_pascal(4096);
  none.context = 0;
  EXPECT_THROW(plan_memory(model_preset("qwen3-vl-2b"), none), Error);
}

// --weights auto: the most precise format whose plan keeps the decoder on the GPU, at every budget.
TEST(MemoryPlan, AutoWeightsAreTheMostPreciseThatKeepTheDecoderOnTheGpu) {
  const ModelFolder model = ModelFolder::open(test::resource_dir() / "models" / "demo-shapes");
  EngineOptions options;
  options.weights = "auto";
  options.cuda_profile = "sm61";
  const auto keeps_decoder = [&](const char* weights, uint64_t budget) {
    MemoryPlanRequest r = memory_plan_request(model, options);
    r.budget = budget;
    r.formats = WeightPolicy::from_name(weights).quantise;
    try {
      return !plan_memory(model.config, r).decoder_split();
    } catch (const Error&) {
      return false;
    }
  };
  std::set<std::string> seen;
  for (uint64_t mib = 4; mib <= 160; mib += 2) {
    MemoryPlanRequest r = memory_plan_request(model, options);
    r.budget = mib * kMiB;
    const std::string chosen = weights_for(model, "auto", r).name;
    seen.insert(chosen);
    const std::vector<std::string> order{"bf16", "q8", "q4"};
    for (const std::string& better : order) {
      if (better == chosen) break;
      EXPECT_FALSE(keeps_decoder(better.c_str(), r.budget)) << mib << " MiB: " << better << " fits, " << chosen << " chosen";
    }
    if (chosen != "q4") {
      EXPECT_TRUE(keeps_decoder(chosen.c_str(), r.budget)) << mib << " MiB";
    }
  }
  // q8 never wins on the demo model: its q8 table (9.9 MiB) takes a whole shared 20 MiB pool segment where the bf16
  // one (14 MiB) takes its own 14, so wherever q8 keeps the head on the GPU, bf16 does too.
  EXPECT_EQ(seen, (std::set<std::string>{"bf16", "q4"})) << "the budgets cover both ends";
  EXPECT_EQ(weights_for(model, "q8", {}).name, "q8");  // a named format is taken as named
}

}  // namespace
}  // namespace qvl
