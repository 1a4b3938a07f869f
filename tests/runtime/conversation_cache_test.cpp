// Conversations kept between requests: a follow-up question prefills only its new tokens, a regenerated answer only
// its last, an edited earlier turn or another picture cuts the reuse where they differ, and every answer is the one
// the whole conversation computed again gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "backend/cuda_plugin.h"
#include "backend/registry.h"
#include "io/random_model.h"
#include "runtime/conversation_cache.h"
#include "runtime/engine.h"
#include "test_support.h"

namespace qvl {
namespace {

constexpr int32_t kPad = 7;  // the image pad token of the unit tests below

CachedConversation kept_with(std::vector<int32_t> ids, std::vector<uint64_t> keys) {
  CachedConversation c;
  c.ids = std::move(ids);
  c.image_keys = std::move(keys);
  return c;
}

TEST(ReusablePrefix, IsTheCommonPrefixShortOfTheLastTokenAndNeverHalfAnImage) {
  const CachedConversation kept = kept_with({1, 2, kPad, kPad, kPad, 3, 4, 5}, {11});
  // A follow-up: everything kept is reused, the image included.
  ReusablePrefix p = reusable_prefix(kept, std::vector<int32_t>{1, 2, kPad, kPad, kPad, 3, 4, 5, 6, 8}, std::vector<uint64_t>{11}, kPad);
  EXPECT_EQ(p.tokens, 8);
  EXPECT_EQ(p.images, 1u);
  // The same prompt again (a regenerated answer): all but the last token, whose logits start the answer.
  p = reusable_prefix(kept, std::vector<int32_t>{1, 2, kPad, kPad, kPad, 3, 4, 5}, std::vector<uint64_t>{11}, kPad);
  EXPECT_EQ(p.tokens, 7);
  // Another picture of the same size: the same pad ids, another key. Cut where it starts.
  p = reusable_prefix(kept, std::vector<int32_t>{1, 2, kPad, kPad, kPad, 3, 4, 5, 6}, std::vector<uint64_t>{12}, kPad);
  EXPECT_EQ(p.tokens, 2);
  EXPECT_EQ(p.images, 0u);
  // A smaller picture: the ids part inside the image's pads. Never half an image.
  p = reusable_prefix(kept, std::vector<int32_t>{1, 2, kPad, kPad, 3, 4}, std::vector<uint64_t>{11}, kPad);
  EXPECT_EQ(p.tokens, 2);
  // An earlier turn edited: the reuse ends where the ids part.
  p = reusable_prefix(kept, std::vector<int32_t>{1, 9, kPad, kPad, kPad, 3}, std::vector<uint64_t>{11}, kPad);
  EXPECT_EQ(p.tokens, 1);
  EXPECT_EQ(reusable_prefix(kept, std::vector<int32_t>{}, std::vector<uint64_t>{}, kPad).tokens, 0);
}

// The demo model, greedy: the conversation's turns with and without the kept cache.
struct Turns {
  std::string device;
  std::unique_ptr<Engine> kept, fresh;  // the same model: one keeps conversations, the other computes every turn
  explicit Turns(std::string d) : device(std::move(d)) {
    const auto model = test::resource_dir() / "models" / "demo-shapes";
    kept = Engine::load(model, {device});
    fresh = Engine::load(model, {device});
  }
  GenerateRequest request(const std::vector<ChatMessage>& messages, const std::vector<std::string>& images) const {
    GenerateRequest r;
    r.messages = messages;
    for (const std::string& name : images) r.images.push_back(ImageInput::file(test::resource_dir() / "samples" / name));
    r.max_new_tokens = 12;
    r.keep_step_logits = true;
    r.conversation_id = "chat-1";
    return r;
  }
  // Asks both engines; checks the kept one's answer is the fresh one's; returns the kept one's result.
  GenerateResult ask(const std::vector<ChatMessage>& messages, const std::vector<std::string>& images) const {
    GenerateRequest r = request(messages, images);
    const GenerateResult with_cache = kept->generate(r);
    r.conversation_id.clear();
    const GenerateResult without = fresh->generate(r);
    EXPECT_EQ(with_cache.generated_ids, without.generated_ids) << device;
    EXPECT_EQ(with_cache.prompt_ids, without.prompt_ids);
    EXPECT_EQ(without.timing.cached_tokens, 0);
    // The kept keys and values were computed by other passes (an answer's one token at a time): the same numbers up
    // to the kernels' rounding, not bit for bit.
    float scale = 0, worst = 0;
    for (std::size_t i = 0; i < without.first_step_logits.size(); ++i) {
      scale = std::max(scale, std::fabs(without.first_step_logits[i]));
      worst = std::max(worst, std::fabs(without.first_step_logits[i] - with_cache.first_step_logits[i]));
    }
    // CPU: float rounding (2e-6 of 15 measured). GPU: the prefill's GEMMs round activations to bf16 where the decode
    // GEMV that computed the kept answer tokens does not (0.014 of 15.5 measured on the H100).
    const float tolerance = device == "cpu" ? 1e-4f : 3e-3f;
    EXPECT_LE(worst, tolerance * scale) << device << ": first-step logits differ by " << worst << " of " << scale;
    std::printf("[ info ] %s: %lld of %zu prompt tokens kept; first-step logits differ by %.3g (largest %.3g)\n",
                device.c_str(), (long long)with_cache.timing.cached_tokens, with_cache.prompt_ids.size(), double(worst),
                double(scale));
    return with_cache;
  }
};

ChatMessage user_with_image(const std::string& text) {
  return {"user", {ContentItem::image(), ContentItem::make_text(text)}};
}

void check_turns(const std::string& device) {
  Turns t(device);
  std::vector<ChatMessage> chat = {user_with_image("What shapes do you see?")};
  const GenerateResult first = t.ask(chat, {"scene-1.png"});
  EXPECT_EQ(first.timing.cached_tokens, 0);

  chat.push_back(ChatMessage::text("assistant", first.text));
  chat.push_back(ChatMessage::text("user", "What colour is the largest one?"));
  const GenerateResult second = t.ask(chat, {"scene-1.png"});
  // Everything of the first turn is served: its prompt and its answer as far as the two tokenise alike.
  EXPECT_GE(second.timing.cached_tokens, int64_t(first.prompt_ids.size())) << device;
  EXPECT_LT(second.timing.cached_tokens, int64_t(second.prompt_ids.size()));

  // Regenerate: the same prompt again runs only its last token.
  const GenerateResult again = t.ask(chat, {"scene-1.png"});
  EXPECT_EQ(again.timing.cached_tokens, int64_t(again.prompt_ids.size()) - 1) << device;
  EXPECT_EQ(again.generated_ids, second.generated_ids);

  // The first question edited: the reuse ends where the prompts part (after the picture).
  chat[0] = user_with_image("Which shapes are there?");
  const GenerateResult edited = t.ask(chat, {"scene-1.png"});
  const auto parted = std::mismatch(edited.prompt_ids.begin(), edited.prompt_ids.end(), again.prompt_ids.begin()).first;
  EXPECT_EQ(edited.timing.cached_tokens, parted - edited.prompt_ids.begin()) << device;

  // Another picture: reuse ends where its pads begin. On a GPU whose vision tower is on it the conversation's cache
  // stays beside the tower's pass over the new picture (the budget here has room for both).
  const GenerateResult other = t.ask(chat, {"scene-2.png"});
  const int32_t pad = int32_t(t.kept->model().config.image_token_id);
  const auto first_pad = std::find(other.prompt_ids.begin(), other.prompt_ids.end(), pad);
  EXPECT_EQ(other.timing.cached_tokens, first_pad - other.prompt_ids.begin()) << device;

  // A follow-up longer than the room the cache was made with: it grows, its prefix copied into the larger one.
  chat.push_back(ChatMessage::text("assistant", other.text));
  std::string long_question;
  for (int i = 0; i < 600; ++i) long_question += " shapes";
  chat.push_back(ChatMessage::text("user", long_question));
  const GenerateResult grown = t.ask(chat, {"scene-2.png"});
  EXPECT_GT(int64_t(grown.prompt_ids.size()), 512);
  EXPECT_GE(grown.timing.cached_tokens, int64_t(other.prompt_ids.size())) << device;

  const ConversationCacheStats stats = t.kept->conversation_cache();
  EXPECT_EQ(stats.conversations, 1);
  EXPECT_GT(stats.bytes, 0u);
  t.kept->forget_conversation("chat-1");
  EXPECT_EQ(t.kept->conversation_cache().conversations, 0);
}

TEST(ConversationCache, FollowUpsRegeneratesAndEditsReuseWhatTheyShareAndAnswerAsAFreshRun) {
  check_turns("cpu");
  if (cuda_plugin().usable) check_turns("cuda");
  else std::printf("[ note ] the CUDA half of this test is skipped: %s\n", cuda_plugin().reason.c_str());
}

// A follow-up stopped before its answer (Esc during the prefill) keeps what the conversation held: the next try
// reuses the first turn, and answers as a fresh run does.
TEST(ConversationCache, AStoppedFollowUpKeepsTheConversation) {
  Turns t("cpu");
  std::vector<ChatMessage> chat = {user_with_image("What shapes do you see?")};
  const GenerateResult first = t.ask(chat, {"scene-1.png"});
  chat.push_back(ChatMessage::text("assistant", first.text));
  chat.push_back(ChatMessage::text("user", "What colour is the largest one?"));
  std::atomic<bool> stop{true};  // set before: the prefill's first layer stops it
  const GenerateResult stopped = t.kept->generate(t.request(chat, {"scene-1.png"}), nullptr, &stop);
  EXPECT_EQ(stopped.stop_reason, "cancelled");
  EXPECT_TRUE(stopped.generated_ids.empty());
  EXPECT_EQ(t.kept->conversation_cache().conversations, 1);
  const GenerateResult again = t.ask(chat, {"scene-1.png"});
  EXPECT_GE(again.timing.cached_tokens, int64_t(first.prompt_ids.size()));
}

// Past the byte budget the least recently used conversation goes; a budget of 0 keeps none.
TEST(ConversationCache, EvictsTheLeastRecentlyUsedPastTheBudget) {
  EngineOptions options{"cpu"};
  const auto probe = Engine::load(test::resource_dir() / "models" / "demo-tiny", options);
  GenerateRequest r;
  r.messages = {ChatMessage::text("user", "Hello there")};
  r.max_new_tokens = 4;
  r.conversation_id = "a";
  probe->generate(r);
  const uint64_t one = probe->conversation_cache().bytes;
  ASSERT_GT(one, 0u);

  options.conversation_cache_bytes = one * 2;
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", options);
  for (const char* id : {"a", "b", "a", "c"}) {  // "b" is the least recently used when "c" comes
    r.conversation_id = id;
    engine->generate(r);
  }
  ConversationCacheStats stats = engine->conversation_cache();
  EXPECT_EQ(stats.conversations, 2);
  EXPECT_EQ(stats.evictions, 1);
  EXPECT_LE(stats.bytes, stats.budget);
  r.conversation_id = "a";
  EXPECT_GT(engine->generate(r).timing.cached_tokens, 0);
  r.conversation_id = "b";
  EXPECT_EQ(engine->generate(r).timing.cached_tokens, 0);  // evicted

  options.conversation_cache_bytes = 0;
  const auto none = Engine::load(test::resource_dir() / "models" / "demo-tiny", options);
  none->generate(r);
  EXPECT_EQ(none->generate(r).timing.cached_tokens, 0);
  EXPECT_EQ(none->conversation_cache().conversations, 0);
}

// Beside a vision pass on a GPU the store keeps what the pool has room for, counted as the pool places a cache (not as
// the budget counts its tensors): least recently used out first.
TEST(ConversationCache, EvictsDownToABoundByTheGivenMeasure) {
  const auto cpu = create_backend(BackendKind::Cpu);
  const ModelConfig config = model_preset("qwen3-vl-2b");
  const std::vector<DecoderPart> parts{{cpu.get(), 0, config.text.num_hidden_layers}};
  ConversationCache store;
  store.set_budget(uint64_t(1) << 30);
  for (auto [id, capacity] : std::vector<std::pair<std::string, int64_t>>{{"a", 1}, {"b", 2}, {"c", 3}}) {
    CachedConversation c;
    c.cache = std::make_unique<KvCache>(parts, config.text, capacity);
    store.put(id, std::move(c));
  }
  const auto by_capacity = [](const CachedConversation& c) { return uint64_t(c.cache->capacity()) * 100; };
  store.evict_down_to(600, by_capacity);  // 100 + 200 + 300: all stay
  EXPECT_EQ(store.stats().conversations, 3);
  store.evict_down_to(599, by_capacity);  // "a", the least recently used, goes
  EXPECT_EQ(store.stats().conversations, 2);
  EXPECT_EQ(store.stats().evictions, 1);
  EXPECT_FALSE(store.take("a").has_value());
  const uint64_t c_bytes = KvCache(parts, config.text, 3).bytes();
  store.evict_down_to(300, by_capacity);  // then "b"
  EXPECT_EQ(store.stats().conversations, 1);
  EXPECT_EQ(store.stats().bytes, c_bytes);  // the budget's own count follows
  store.evict_down_to(0, by_capacity);
  EXPECT_EQ(store.stats().conversations, 0);
  EXPECT_EQ(store.stats().bytes, 0u);
}

// On a GPU whose pool is tight, a turn that brings a picture and a long question (its cache grows: the kept one and
// a larger new one side by side while the prefix is copied) keeps the other conversations only as far as the pool
// has room beside its vision pass and prefill, counted as the pool places caches, evicting the least recently used
// first: the request is not refused, the pool stays within its budget, and every answer is a fresh run's. The budget
// is chosen from the plan so that a text turn's prefill has room for three and a half short chats' caches.
TEST(ConversationCache, AGrowingPictureTurnOnATightGpuEvictsTheLeastRecentlyUsedAndAnswersAsAFreshRun) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  const auto model = test::resource_dir() / "models" / "demo-shapes";
  const auto text_turn = [](const char* id) {
    GenerateRequest r;
    r.messages = {ChatMessage::text("user", std::string("Tell me about ") + id)};
    r.max_new_tokens = 6;
    r.conversation_id = id;
    return r;
  };
  std::string long_question = "What shapes do you see?";
  for (int i = 0; i < 600; ++i) long_question += " shapes";
  GenerateRequest picture;
  picture.messages = {ChatMessage::text("user", "Tell me about a"), user_with_image(long_question)};
  picture.images.push_back(ImageInput::file(test::resource_dir() / "samples" / "scene-1.png"));
  picture.max_new_tokens = 8;

  EngineOptions options{"cuda"};
  options.plan_context = 2048;
  const auto fresh = Engine::load(model, options);
  const GenerateResult whole = fresh->generate(picture);
  ASSERT_GT(whole.prompt_ids.size(), 512u);  // past a short chat's 512 tokens of cache: the turn grows it
  const auto probe = Engine::load(model, options);
  ASSERT_TRUE(probe->memory_plan().has_value());
  const MemoryPlan generous = *probe->memory_plan();
  const TextConfig& text = probe->model().config.text;
  const DType cache_type = *dtype_from_name(probe->kv_cache());  // auto: bf16 for this bf16 checkpoint
  const uint64_t cache = kv_cache_pool_bytes(text, text.num_hidden_layers, 512, cache_type);  // a short chat's
  const uint64_t text_room = generous.room_beside_prefill(0);  // moves one for one with the budget
  ASSERT_GT(text_room, 4 * cache);
  options.device_memory_limit = std::size_t(generous.budget - text_room + cache * 7 / 2);

  const auto tight = Engine::load(model, options);
  ASSERT_TRUE(tight->memory_plan().has_value());
  ASSERT_TRUE(tight->memory_plan()->everything_on_gpu()) << tight->memory_plan()->summary();
  for (const char* id : {"a", "b", "c"}) tight->generate(text_turn(id));
  const ConversationCacheStats before = tight->conversation_cache();
  EXPECT_EQ(before.conversations, 3);

  // "a", the least recently used, brings the picture: its own caches are decided first, then "b" goes before "c".
  GenerateRequest a = picture;
  a.conversation_id = "a";
  const GenerateResult with_picture = tight->generate(a);
  EXPECT_EQ(with_picture.generated_ids, whole.generated_ids);
  const ConversationCacheStats after = tight->conversation_cache();
  EXPECT_GT(after.evictions, before.evictions);
  const MemoryReport pool = tight->memory_report();
  EXPECT_LE(pool.reserved_peak, pool.capacity);
  std::printf("[ info ] budget %.1f MiB, a short chat's cache %.2f MiB: %lld conversations kept before the picture, "
              "%lld after (%lld evicted); pool peak %.1f of %.1f MiB\n",
              double(options.device_memory_limit) / (1 << 20), double(cache) / (1 << 20), (long long)before.conversations,
              (long long)after.conversations, (long long)(after.evictions - before.evictions),
              double(pool.reserved_peak) / (1 << 20), double(pool.capacity) / (1 << 20));

  // "b" went first: its next turn is computed whole, and answers as a fresh run does.
  const GenerateResult again = tight->generate(text_turn("b"));
  EXPECT_EQ(again.timing.cached_tokens, 0);
  GenerateRequest b_fresh = text_turn("b");
  b_fresh.conversation_id.clear();
  EXPECT_EQ(again.generated_ids, fresh->generate(b_fresh).generated_ids);
}

// A conversation's keys were computed with the kernels of their time: switching fusions drops them.
TEST(ConversationCache, ChangingFusionsDropsTheKeptConversations) {
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", {"cpu"});
  GenerateRequest r;
  r.messages = {ChatMessage::text("user", "Hello there")};
  r.max_new_tokens = 3;
  r.conversation_id = "a";
  engine->generate(r);
  EXPECT_EQ(engine->conversation_cache().conversations, 1);
  engine->set_fusions(Fusions::none());
  EXPECT_EQ(engine->conversation_cache().conversations, 0);
  EXPECT_EQ(engine->generate(r).timing.cached_tokens, 0);
}

}  // namespace
}  // namespace qvl
