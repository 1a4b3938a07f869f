// The sampler against its definition: greedy is argmax (first on ties), top-k/top-p keep what transformers keeps,
// draws follow the softmax, and the repetition penalty divides positive and multiplies negative logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "backend/backend.h"
#include "core/error.h"
#include "core/top_k.h"
#include "runtime/sampler.h"

namespace qvl {
namespace {

TEST(Sampler, GreedyTakesTheFirstLargestLogit) {
  Sampler s({});
  std::vector<float> logits{0.5f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.next(logits, {}), 1);
}

// Greedy over a vocabulary's worth of logits (it runs in 16 lanes and a tail) against a plain first-index argmax: equal
// maxima in other lanes, earlier and later blocks, the tail, every value -inf, and NaN in a lane or the tail.
TEST(Sampler, GreedyOverManyLogitsIsTheFirstIndexOfTheLargest) {
  const auto plain_argmax = [](const std::vector<float>& l) {
    std::size_t best = 0;
    for (std::size_t i = 0; i < l.size(); ++i)
      if (l[i] > l[best]) best = i;
    return int32_t(best);
  };
  for (const std::size_t n : {std::size_t(1), std::size_t(15), std::size_t(16), std::size_t(17), std::size_t(1000),
                              std::size_t(151936 + 7)}) {
    std::vector<float> base(n);
    for (std::size_t i = 0; i < n; ++i) base[i] = std::sin(float(i) * 0.37f);  // below 1 everywhere
    const std::vector<std::vector<std::size_t>> tops{{0}, {n - 1}, {n / 2, n / 3}, {n - 1, n / 2}, {n / 3, n / 3 + 16},
                                                     {n / 3 + 5, n / 3 + 16, n / 3 + 1}};
    for (const auto& at : tops) {
      std::vector<float> l = base;
      for (std::size_t i : at)
        if (i < n) l[i] = 2.0f;  // equal maxima: the first index wins
      std::vector<float> copy = l;
      Sampler s({});
      EXPECT_EQ(s.next(copy, {}), plain_argmax(l)) << n << " values";
    }
    std::vector<float> all_low(n, -std::numeric_limits<float>::infinity());
    EXPECT_EQ(Sampler({}).next(all_low, {}), 0) << n << " values of -inf";
    for (const std::size_t at : {std::size_t(0), n / 2, n - 1}) {
      std::vector<float> l = base;
      l[at] = std::nanf("");
      EXPECT_THROW(Sampler({}).next(l, {}), Error) << "NaN at " << at << " of " << n;
    }
  }
}

// What a backend may pick for the sampler: greedy with no penalty only; its NaN flag fails as next() does.
TEST(Sampler, ABackendsPickIsTakenOnlyForPlainGreedy) {
  EXPECT_TRUE(Sampler({}).greedy_only());
  SamplingOptions hot, repeat, present, frequent;
  hot.temperature = 0.7, repeat.repetition_penalty = 1.1, present.presence_penalty = 0.5, frequent.frequency_penalty = 0.5;
  for (const SamplingOptions& o : {hot, repeat, present, frequent}) EXPECT_FALSE(Sampler(o).greedy_only());
  EXPECT_EQ(Sampler({}, 100).vocabulary(151), 100);
  EXPECT_EQ(Sampler({}, 0).vocabulary(151), 151);
  EXPECT_EQ(Sampler({}).take_pick(42, false), 42);
  try {
    Sampler({}).take_pick(42, true);
    ADD_FAILURE() << "a NaN pick was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN logits"), std::string::npos) << e.what();
  }
}

TEST(Sampler, DrawsFollowTheTemperedSoftmax) {
  SamplingOptions o;
  o.temperature = 0.5;
  o.seed = 42;
  Sampler s(o);
  const std::vector<float> base{0.0f, std::log(2.0f) * 0.5f, std::log(4.0f) * 0.5f};  // at T=0.5: weights 1:2:4
  std::map<int, int> counts;
  const int draws = 70000;
  for (int i = 0; i < draws; ++i) {
    auto l = base;
    ++counts[s.next(l, {})];
  }
  EXPECT_NEAR(counts[0] / double(draws), 1.0 / 7, 0.01);
  EXPECT_NEAR(counts[1] / double(draws), 2.0 / 7, 0.01);
  EXPECT_NEAR(counts[2] / double(draws), 4.0 / 7, 0.01);
}

TEST(Sampler, TopKAndTopPKeepOnlyTheirSets) {
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_k = 2;
  Sampler k2(o);
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> l{5.0f, 4.0f, 4.5f, 0.0f};
    const int t = k2.next(l, {});
    ASSERT_TRUE(t == 0 || t == 2) << t;
  }
  o.top_k = 0;
  o.top_p = 0.5;  // probabilities 0.6, 0.3, 0.1: the smallest set with mass >= 0.5 is {0}
  Sampler p(o);
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> l{std::log(0.6f), std::log(0.3f), std::log(0.1f)};
    ASSERT_EQ(p.next(l, {}), 0);
  }
  o.top_p = 0.8;  // removes tokens whose cumulative mass from below is <= 0.2: only token 2
  Sampler p8(o);
  std::map<int, int> seen;
  for (int i = 0; i < 4000; ++i) {
    std::vector<float> l{std::log(0.6f), std::log(0.3f), std::log(0.1f)};
    ++seen[p8.next(l, {})];
  }
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_NEAR(seen[0] / 4000.0, 2.0 / 3, 0.03);
}

// Top-k over many logits (the one-pass selection of the k-th largest): the kept set is every id at or above the k-th
// largest logit counted with its repeats, ties with it included, as a sort gives; in shuffled order with each value
// repeated, and in rising order (every logit a new largest: the selection's worst case).
TEST(Sampler, TopKOverManyLogitsKeepsTheSortedSetWithTies) {
  const auto kept_by_sort = [](const std::vector<float>& logits, std::size_t k) {
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    std::set<int> kept;
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (logits[i] >= sorted[k - 1]) kept.insert(int(i));
    return kept;
  };
  std::vector<float> repeated(10000), rising(10000);
  for (int i = 0; i < 10000; ++i) {
    repeated[std::size_t(i)] = float((i * 7919) % 1000) / 100.0f;  // each of 1,000 values 10 times
    rising[std::size_t(i)] = float(i) / 1000.0f;
  }
  for (const auto& [logits, k] : {std::pair{repeated, std::size_t(25)}, std::pair{rising, std::size_t(20)}}) {
    const std::set<int> kept = kept_by_sort(logits, k);
    ASSERT_EQ(kept.size(), k == 25 ? 30u : 20u);  // 25th largest of values repeated 10 times: 3 values, 30 ids
    SamplingOptions o;
    o.temperature = 1.0;
    o.top_k = int64_t(k);
    Sampler sampler(o);
    std::set<int> drawn;
    for (int i = 0; i < 5000; ++i) {
      std::vector<float> l = logits;
      const int id = sampler.next(l, {});
      ASSERT_TRUE(kept.count(id)) << "id " << id << " is outside the top-k set";
      drawn.insert(id);
    }
    EXPECT_EQ(drawn, kept);  // every kept id is drawn (each has about 1/30 or more of the mass)
  }
}

// Top-p over many candidates (the selection that replaced a full sort walks several halvings): the kept set is the
// one a sort gives, and its tokens are drawn in proportion. 5,000 ids of shuffled, distinct logits, top_p 0.6.
TEST(Sampler, TopPOverManyCandidatesKeepsTheSortedPrefix) {
  constexpr int kIds = 5000;
  std::vector<float> logits(kIds);
  for (int i = 0; i < kIds; ++i) logits[std::size_t(i)] = float((i * 7919) % kIds) / 500.0f;  // a permutation of 0..10
  std::vector<int> by_likelihood(kIds);
  std::iota(by_likelihood.begin(), by_likelihood.end(), 0);
  std::sort(by_likelihood.begin(), by_likelihood.end(), [&](int a, int b) { return logits[std::size_t(a)] > logits[std::size_t(b)]; });
  double total = 0;
  for (float l : logits) total += std::exp(double(l));
  std::set<int> kept;  // transformers' rule: keep while the mass before a token is under top_p
  double before = 0;
  for (int id : by_likelihood) {
    if (before >= 0.6 * total) break;
    kept.insert(id);
    before += std::exp(double(logits[std::size_t(id)]));
  }
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_p = 0.6;
  Sampler sampler(o);
  std::map<int, int> drawn;
  for (int i = 0; i < 20000; ++i) {
    std::vector<float> l = logits;
    ++drawn[sampler.next(l, {})];
  }
  for (const auto& [id, n] : drawn) ASSERT_TRUE(kept.count(id)) << "id " << id << " is outside the top-p set";
  const int most = by_likelihood[0];
  double kept_mass = 0;
  for (int id : kept) kept_mass += std::exp(double(logits[std::size_t(id)]));
  EXPECT_NEAR(drawn[most] / 20000.0, std::exp(double(logits[std::size_t(most)])) / kept_mass, 0.01);
}

// A few candidates (top-k's): core/top_k.h's draw, which the GPU repeats, keeps transformers' top-p set (the most
// likely, ties by the lower id, while the mass before them is under top_p), takes one random number (none where there
// is no candidate) and walks the kept ids in id order: the token a sort of the same candidates gives.
TEST(Sampler, AFewCandidatesDrawAsASortOfThemSays) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = 1 + rng() % kMaxSmallDraw;
    const bool tied = trial % 3 == 0;  // values on a coarse grid: many equal likelihoods
    std::vector<TopKCandidate> candidates;
    int32_t id = 0;
    for (std::size_t i = 0; i < n; ++i) {
      id += 1 + int32_t(rng() % 1000);
      const float v = normal(rng);
      candidates.push_back({tied ? std::round(v) : v, id});
    }
    const double top_p = std::array{1.0, 0.95, 0.5, 0.1}[std::size_t(trial % 4)];
    uint64_t state = uint64_t(trial) * 12345 + 1, expected_state = state;
    const double u = next_uniform(expected_state);
    float best = -INFINITY;
    for (const TopKCandidate& c : candidates) best = std::max(best, c.value);
    std::vector<double> p;
    for (const TopKCandidate& c : candidates) p.push_back(std::exp(double(c.value) - double(best)));
    std::vector<std::size_t> by_likelihood(n);
    std::iota(by_likelihood.begin(), by_likelihood.end(), std::size_t(0));
    std::sort(by_likelihood.begin(), by_likelihood.end(), [&](std::size_t a, std::size_t b) {
      return p[a] > p[b] || (p[a] == p[b] && candidates[a].id < candidates[b].id);
    });
    double total = 0;
    for (double x : p) total += x;
    std::vector<bool> kept(n, false);
    double before = 0;
    for (std::size_t i : by_likelihood) {
      if (top_p < 1.0 && before >= top_p * total) break;
      kept[i] = true;
      before += p[i];
    }
    double kept_mass = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (kept[i]) kept_mass += p[i];
    double point = u * kept_mass;
    int32_t expected = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (kept[i]) {
        expected = candidates[i].id;
        if ((point -= p[i]) < 0) break;
      }
    ASSERT_EQ(draw_from_candidates(candidates, top_p, state), expected) << "trial " << trial;
    ASSERT_EQ(state, expected_state) << "trial " << trial;  // one random number a draw
    if (trial % 10 == 0) {  // the sampler's own draw from such candidates is this one, from its state on
      SamplingOptions o;
      o.temperature = 1.0, o.top_k = 64, o.top_p = top_p, o.seed = uint64_t(trial);
      Sampler sampler(o);
      uint64_t from = sampler.draw_state();
      ASSERT_EQ(sampler.next_from_candidates(candidates, false), draw_from_candidates(candidates, top_p, from));
      ASSERT_EQ(sampler.draw_state(), from);
    }
  }
  uint64_t state = 42;
  // +inf values are certain and the rest never drawn (exp(inf - inf) would make every likelihood NaN).
  const std::vector<TopKCandidate> with_inf{{1.0f, 3}, {INFINITY, 8}, {2.0f, 9}, {INFINITY, 12}};
  std::set<int32_t> drawn;
  for (int i = 0; i < 200; ++i) drawn.insert(draw_from_candidates(with_inf, 0.9, state));
  EXPECT_EQ(drawn, (std::set<int32_t>{8, 12}));
  state = 42;
  EXPECT_EQ(draw_from_candidates({}, 0.5, state), 0);  // nothing to draw from: id 0, no random number taken
  EXPECT_EQ(state, 42u);
  std::vector<TopKCandidate> too_many(kMaxSmallDraw + 1, TopKCandidate{1.0f, 0});
  EXPECT_THROW(draw_from_candidates(too_many, 0.5, state), Error);
}

TEST(Sampler, RepetitionPenaltyScalesSeenTokensOnce) {
  SamplingOptions o;
  o.repetition_penalty = 2.0;
  Sampler s(o);
  std::vector<float> l{4.0f, 3.0f, -1.0f};
  const std::vector<int32_t> history{0, 0, 2};
  EXPECT_EQ(s.next(l, history), 1);  // 4 / 2 = 2 < 3
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);
}

// OpenAI's penalties count only the answer's tokens: 1.0 presence + 0.5 per occurrence, from answer_start on.
TEST(Sampler, PresenceAndFrequencyPenaltiesCountTheAnswersTokensOnly) {
  SamplingOptions o;
  o.presence_penalty = 1.0;
  o.frequency_penalty = 0.5;
  Sampler s(o);
  std::vector<float> l{4.0f, 3.5f, 1.0f, 0.0f};
  const std::vector<int32_t> history{1, 1, 0, 0, 2};  // prompt {1, 1}, answer {0, 0, 2}
  EXPECT_EQ(s.next(l, history, 2), 1);               // 4 - 1 - 2 * 0.5 = 2 < 3.5 (1 only in the prompt)
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[1], 3.5f);
  EXPECT_FLOAT_EQ(l[2], -0.5f);
  EXPECT_FLOAT_EQ(l[3], 0.0f);
  for (double SamplingOptions::*option : {&SamplingOptions::presence_penalty, &SamplingOptions::frequency_penalty}) {
    SamplingOptions bad;
    bad.*option = 2.5;
    EXPECT_THROW(Sampler{bad}, Error);
    bad.*option = std::nan("");
    EXPECT_THROW(Sampler{bad}, Error);
  }
}

TEST(Sampler, IsReproducibleForASeedAndRejectsBadOptions) {
  SamplingOptions o;
  o.temperature = 1.0;
  o.seed = 7;
  Sampler a(o), b(o);
  for (int i = 0; i < 100; ++i) {
    std::vector<float> l1(50), l2;
    for (int j = 0; j < 50; ++j) l1[std::size_t(j)] = float(j % 7);
    l2 = l1;
    ASSERT_EQ(a.next(l1, {}), b.next(l2, {}));
  }
  o.top_p = 0;
  EXPECT_THROW(Sampler{o}, Error);
  o.top_p = 1;
  o.temperature = -1;
  EXPECT_THROW(Sampler{o}, Error);
  // NaN passed every check once (a comparison with NaN is false); each option now names it.
  for (double SamplingOptions::*option : {&SamplingOptions::temperature, &SamplingOptions::top_p,
                                           &SamplingOptions::repetition_penalty}) {
    SamplingOptions bad;
    bad.*option = std::nan("");
    try {
      Sampler{bad};
      ADD_FAILURE() << "NaN accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("nan"), std::string::npos) << e.what();
    }
  }
  SamplingOptions infinite;
  infinite.temperature = INFINITY;
  EXPECT_THROW(Sampler{infinite}, Error);
}

// The output layer has rows past the tokenizer's ids (151,936 against 151,669 in Qwen3-VL): no text stands for them,
// so no temperature may pick one, and greedy takes the best id the tokenizer knows.
TEST(Sampler, NeverPicksIdsPastTheVocabulary) {
  SamplingOptions o;
  o.temperature = 5.0;
  o.seed = 3;
  Sampler hot(o, 10);
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> l(16, 0.0f);
    for (std::size_t j = 10; j < 16; ++j) l[j] = 8.0f;  // the padding rows would take nearly every draw
    ASSERT_LT(hot.next(l, {}), 10);
  }
  Sampler greedy({}, 10);
  std::vector<float> l{0.0f, 1.0f, 0.5f, 0, 0, 0, 0, 0, 0, 0, 9.0f, 9.5f};
  EXPECT_EQ(greedy.next(l, {}), 1);
}

TEST(Sampler, NaNLogitsFailWithTheReason) {
  Sampler s({});
  std::vector<float> l{0.0f, std::nanf(""), 1.0f};
  try {
    s.next(l, {});
    FAIL() << "NaN logits accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN logits"), std::string::npos) << e.what();
  }
}

// Top-k's candidates found by a backend (Backend::top_k_candidates; the CPU's here, which the GPU's kernel is compared
// with in qvl-test-backend-ops) give the draws next() gives from the whole row: the same token at every step for a
// seed, with ties at the k-th largest, -inf values, top-p on and off, k of 1, 20 and 64; and the backend's own draw
// (TopKSpec's, from the sampler's state) is that token, its state the sampler's after. Ties past what the result
// holds come back as "did not fit" (no draw: 0, the state kept); NaN fails as next() does; out-of-range settings are
// refused by name.
TEST(Sampler, ABackendsTopKCandidatesGiveTheSameDraws) {
  const auto cpu = make_cpu_backend();
  constexpr int64_t kVocabulary = 151936, kPadded = kVocabulary + 64;  // the output layer's rows past the vocabulary
  const auto row = [&](int step, const std::vector<std::pair<int64_t, float>>& set) {
    Tensor t = Tensor::empty(DType::F32, {1, kPadded});
    float* l = t.data<float>();
    for (int64_t i = 0; i < kPadded; ++i) l[i] = 4.0f * std::sin(float(i) * 0.37f + float(step)) * std::cos(float(i) * 0.011f);
    for (auto [i, v] : set) l[i] = v;
    return t;
  };
  const auto candidates = [&](const Tensor& logits, const TopKSpec& spec) {
    Tensor out = cpu->alloc_indices(TopKSpec::kSlots);
    cpu->top_k_candidates(logits, spec, out);
    return read_top_k_candidates(out);
  };
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* name;
    int64_t k;
    double temperature, top_p;
    std::vector<std::pair<int64_t, float>> set;
  };
  std::vector<std::pair<int64_t, float>> tied, minus_inf;
  for (int64_t i = 0; i < 40; ++i) tied.push_back({i * 3001 + 11, i < 10 ? 5.0f : 4.5f});  // the 20th: 30 equal ones
  for (int64_t i = 0; i < kVocabulary; i += 3) minus_inf.push_back({i, -inf});
  const std::vector<Case> cases{{"k 20, the models' defaults", 20, 0.7, 0.8, {}},
                                {"k 1", 1, 1.0, 1.0, {}},
                                {"k 64, hot", 64, 1.7, 0.95, {}},
                                {"ties at the k-th largest", 20, 0.7, 1.0, tied},
                                {"a third -inf, the largest past the vocabulary", 20, 0.7, 0.8, minus_inf}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SamplingOptions o;
    o.temperature = c.temperature, o.top_k = c.k, o.top_p = c.top_p, o.seed = 11;
    Sampler whole(o, std::size_t(kVocabulary)), found(o, std::size_t(kVocabulary));
    ASSERT_TRUE(found.top_k_only(TopKSpec::kMaxTopK));
    for (int step = 0; step < 40; ++step) {
      std::vector<std::pair<int64_t, float>> set = c.set;
      set.push_back({kVocabulary + 5, 99.0f});  // never picked: past the vocabulary
      const Tensor logits = row(step, set);
      Tensor out = cpu->alloc_indices(TopKSpec::kSlots), state = cpu->alloc_indices(1), drawn = cpu->alloc_indices(1);
      const auto start = int64_t(found.draw_state());
      cpu->write_indices(state, {&start, 1});
      TopKSpec spec{kVocabulary, c.k, c.temperature};
      spec.top_p = c.top_p, spec.draw_state = &state, spec.drawn = &drawn;
      cpu->top_k_candidates(logits, spec, out);
      const TopKResult r = read_top_k_candidates(out);
      ASSERT_TRUE(r.fitted);
      ASSERT_FALSE(r.nan);
      ASSERT_GE(r.candidates.size(), std::size_t(c.k));
      ASSERT_TRUE(std::is_sorted(r.candidates.begin(), r.candidates.end(),
                                 [](const TopKCandidate& a, const TopKCandidate& b) { return a.id < b.id; }));
      std::vector<float> copy(logits.data<float>(), logits.data<float>() + kPadded);
      const int32_t token = found.next_from_candidates(r.candidates, r.nan);
      ASSERT_EQ(token, whole.next(copy, {})) << "step " << step;
      ASSERT_EQ(drawn.data<int64_t>()[0], token) << "step " << step;
      ASSERT_EQ(uint64_t(state.data<int64_t>()[0]), found.draw_state()) << "step " << step;
    }
  }
  std::vector<std::pair<int64_t, float>> many_tied;
  for (int64_t i = 0; i < 200; ++i) many_tied.push_back({i * 701 + 3, 9.0f});
  EXPECT_FALSE(candidates(row(0, many_tied), {kVocabulary, 20, 0.7}).fitted);  // 200 candidates: past 128
  {
    Tensor out = cpu->alloc_indices(TopKSpec::kSlots), state = cpu->alloc_indices(1), drawn = cpu->alloc_indices(1);
    const int64_t start = 12345, unwritten = -7;
    cpu->write_indices(state, {&start, 1});
    cpu->write_indices(drawn, {&unwritten, 1});
    TopKSpec spec{kVocabulary, 20, 0.7};
    spec.top_p = 0.8, spec.draw_state = &state, spec.drawn = &drawn;
    cpu->top_k_candidates(row(0, many_tied), spec, out);
    EXPECT_EQ(drawn.data<int64_t>()[0], 0);  // nothing drawn where the candidates did not fit
    EXPECT_EQ(state.data<int64_t>()[0], start);
    // A draw asks for both tensors, and a top_p in (0, 1].
    spec.draw_state = nullptr;
    EXPECT_THROW(cpu->top_k_candidates(row(0, {}), spec, out), Error);
    spec.draw_state = &state;
    for (const double top_p : {0.0, 1.5, std::nan("")}) {
      spec.top_p = top_p;
      EXPECT_THROW(cpu->top_k_candidates(row(0, {}), spec, out), Error) << top_p;
    }
  }
  const TopKResult nan = candidates(row(0, {{77, std::nanf("")}}), {kVocabulary, 20, 0.7});
  EXPECT_TRUE(nan.nan);
  EXPECT_THROW(Sampler(SamplingOptions{.temperature = 0.7, .top_k = 20}).next_from_candidates(nan.candidates, true), Error);
  const Tensor logits = row(0, {});
  for (const TopKSpec& bad : {TopKSpec{kVocabulary, 0, 0.7}, TopKSpec{kVocabulary, 65, 0.7}, TopKSpec{20, 20, 0.7},
                              TopKSpec{kVocabulary, 20, 0.0}, TopKSpec{kPadded + 1, 20, 0.7}})
    EXPECT_THROW(candidates(logits, bad), Error) << bad.vocabulary << " " << bad.top_k << " " << bad.temperature;
  SamplingOptions penalised;
  penalised.temperature = 0.7, penalised.top_k = 20, penalised.repetition_penalty = 1.1;
  EXPECT_FALSE(Sampler(penalised).top_k_only(TopKSpec::kMaxTopK));  // penalties need the history: on the host
}

}  // namespace
}  // namespace qvl
