// The CPU's one-query attention (a decode step) against softmax(q·k·scale)·v in double: one to four query heads a kv
// head (the row kernels take them a pair at a time), a window of keys that starts past the first, spans
// that are not whole blocks, the keys cut into 1 to 7 chunks (the merge of partial softmaxes), including chunks left
// empty when the span does not divide, and the kv heads into groups (8 into 3: uneven); no visible key gives zeros,
// as the general loop does. A bf16 cache gives the bits of an f32 cache holding its values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/decode_attention.h"
#include "core/half.h"

namespace qvl::cpu {
namespace {

void check_every_span_and_chunking(int64_t heads, int64_t kv_heads, int64_t d) {
  constexpr int64_t cache = 700;
  SCOPED_TRACE(testing::Message() << heads << " heads over " << kv_heads << ", d " << d);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(heads * d), k(cache * kv_heads * d), v(k.size());
  for (auto& e : q) e = normal(rng);
  for (auto& e : k) e = 2.0f * normal(rng);  // wide scores: the chunks' maxima differ
  for (auto& e : v) e = normal(rng);
  std::vector<uint16_t> k16(k.size()), v16(v.size());  // the same in bf16, and the values those hold in f32
  std::vector<float> k_wide(k.size()), v_wide(v.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k_wide[i] = bf16_to_f32(k16[i] = f32_to_bf16(k[i]));
    v_wide[i] = bf16_to_f32(v16[i] = f32_to_bf16(v[i]));
  }
  const float scale = 1.0f / std::sqrt(float(d));
  for (const auto& [first, end] : {std::pair<int64_t, int64_t>{0, 1}, {0, 700}, {37, 600}, {5, 13}, {5, 5}}) {
    std::vector<double> want(heads * d, 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvh = h / (heads / kv_heads);
      std::vector<double> score(std::size_t(end - first));
      double top = -INFINITY, total = 0;
      for (int64_t t = first; t < end; ++t) {
        double s = 0;
        for (int64_t e = 0; e < d; ++e) s += double(q[h * d + e]) * double(k[(t * kv_heads + kvh) * d + e]);
        top = std::max(top, score[std::size_t(t - first)] = s * scale);
      }
      for (double& s : score) total += s = std::exp(s - top);
      for (int64_t t = first; t < end; ++t)
        for (int64_t e = 0; e < d; ++e)
          want[std::size_t(h * d + e)] += score[std::size_t(t - first)] / total * double(v[(t * kv_heads + kvh) * d + e]);
    }
    for (const int64_t chunks : {0, 1, 2, 3, 7})
      for (const int64_t groups : {0, 1, 3}) {  // the kv heads in groups: all, or 3 (uneven where there are 8)
        SCOPED_TRACE(testing::Message() << "keys [" << first << ", " << end << ") in " << chunks << " chunks, "
                                        << groups << " head groups");
        std::vector<float> got(heads * d, NAN);
        decode_attention({.q = q.data(), .k = k.data(), .v = v.data(), .heads = heads, .kv_heads = kv_heads, .d = d,
                          .first_key = first, .end_key = end, .scale = scale, .out = got.data(), .chunks = chunks,
                          .head_groups = groups});
        for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << "element " << i;
        // The same keys and values in a bf16 cache: the bits of the f32 cache that holds their values.
        std::vector<float> narrow(heads * d, NAN), through_f32(heads * d, NAN);
        decode_attention({.q = q.data(), .k = k16.data(), .v = v16.data(), .type = DType::BF16, .heads = heads,
                          .kv_heads = kv_heads, .d = d, .first_key = first, .end_key = end, .scale = scale,
                          .out = narrow.data(), .chunks = chunks, .head_groups = groups});
        decode_attention({.q = q.data(), .k = k_wide.data(), .v = v_wide.data(), .heads = heads, .kv_heads = kv_heads,
                          .d = d, .first_key = first, .end_key = end, .scale = scale, .out = through_f32.data(),
                          .chunks = chunks, .head_groups = groups});
        ASSERT_EQ(0, std::memcmp(narrow.data(), through_f32.data(), narrow.size() * sizeof(float))) << "bf16 cache";
      }
  }
}

struct Shape {
  int64_t heads, kv_heads, d;
};

TEST(DecodeAttention, MatchesTheSoftmaxInDoubleForAnyChunking) {
  // Two, one and four query heads a kv head, three (a pair, then one alone) at 8 kv heads and at 2.
  for (const auto [heads, kv_heads, d] :
       {Shape{4, 2, 72}, Shape{2, 2, 128}, Shape{8, 2, 128}, Shape{24, 8, 64}, Shape{6, 2, 72}})
    check_every_span_and_chunking(heads, kv_heads, d);
}

}  // namespace
}  // namespace qvl::cpu
