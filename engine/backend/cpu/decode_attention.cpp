#include "backend/cpu/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "core/cancel.h"
#include "core/thread_pool.h"

namespace qvl::cpu {
namespace {

// The fewest keys worth a task of their own: a chunk of 256 keys at d = 128 reads 256 KB of keys and values, tens
// of microseconds of work against a hand-over of a few.
constexpr int64_t kMinChunkKeys = 256;
// Keys a block: at d = 128 in f32, 32 rows of keys (or values) are 16 KB, still in L2 when the other query heads of
// their kv head read them (not in L1: the 2B's rows are 4 KB apart, so a block's rows fall in the same few L1 sets).
// Each head reading its kv head's whole chunk in turn read the 2B's cache twice from memory (docs/performance.md,
// "The CPU's decode attention at long contexts").
constexpr int64_t kBlockKeys = 32;

}  // namespace

void decode_attention(const DecodeAttention& a) {
  const int64_t group = a.heads / a.kv_heads, span = std::max<int64_t>(0, a.end_key - a.first_key), d = a.d;
  auto& pool = ThreadPool::global();
  // Chunks a kv head: enough for every thread to have one, none shorter than kMinChunkKeys.
  const int64_t wanted = (int64_t(pool.size()) + a.kv_heads - 1) / a.kv_heads;
  const int64_t chunks = a.chunks > 0 ? a.chunks : std::max<int64_t>(1, std::min(wanted, span / kMinChunkKeys));
  const int64_t chunk = (span + chunks - 1) / chunks;
  // Each (query head, chunk): its largest scaled score, its sum of exponentials and its unnormalised weighted values.
  std::vector<float> maxima(std::size_t(a.heads * chunks), -INFINITY), totals(maxima.size(), 0.0f),
      partial(maxima.size() * std::size_t(d), 0.0f);
  const auto& kernels = attention_kernels();
  const std::size_t stride = std::size_t(a.kv_heads * d);
  pool.parallel_for(std::size_t(a.kv_heads * chunks), 1, [&](std::size_t begin, std::size_t end) {
    std::vector<float> scores(static_cast<std::size_t>(group * chunk)), block_out(static_cast<std::size_t>(d));
    for (std::size_t task = begin; task < end; ++task) {
      if (stop_requested(a.stop)) return;
      const int64_t kvh = int64_t(task) / chunks, c = int64_t(task) % chunks;
      const int64_t t0 = a.first_key + c * chunk, n = std::min(a.end_key, t0 + chunk) - t0;
      if (n <= 0) continue;  // the last chunks of a span that does not divide evenly
      const float* keys = a.k + (t0 * a.kv_heads + kvh) * d;
      const float* values = a.v + (t0 * a.kv_heads + kvh) * d;
      const int64_t h0 = kvh * group;
      // The group's query heads take each block of keys (and later of values) in turn, so the block is read from
      // memory once and from cache for the other heads.
      for (int64_t b = 0; b < n; b += kBlockKeys)
        for (int64_t g = 0; g < group; ++g)
          kernels.score_rows(a.q + (h0 + g) * d, keys + b * int64_t(stride), std::size_t(std::min(kBlockKeys, n - b)),
                             stride, std::size_t(d), scores.data() + g * n + b);
      for (int64_t g = 0; g < group; ++g) {
        float* const row = scores.data() + g * n;
        const std::size_t slot = std::size_t((h0 + g) * chunks + c);
        float best = -INFINITY;
        for (int64_t t = 0; t < n; ++t) best = std::max(best, row[t] * a.scale);
        totals[slot] = kernels.exp_scaled(row, std::size_t(n), a.scale, best);
        maxima[slot] = best;
      }
      for (int64_t b = 0; b < n; b += kBlockKeys)
        for (int64_t g = 0; g < group; ++g) {
          kernels.weighted_rows(scores.data() + g * n + b, std::size_t(std::min(kBlockKeys, n - b)),
                                values + b * int64_t(stride), stride, std::size_t(d), block_out.data());
          float* const acc = partial.data() + std::size_t((h0 + g) * chunks + c) * std::size_t(d);
          for (int64_t e = 0; e < d; ++e) acc[e] += block_out[std::size_t(e)];
        }
    }
  });
  // The chunks merged: out = Σ_c e^(m_c − M) · acc_c / Σ_c e^(m_c − M) · total_c, M the largest maximum (an empty
  // chunk's −∞ weighs 0; no visible key at all gives zeros, as the general loop does).
  std::vector<float> weight(static_cast<std::size_t>(chunks));
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* m = maxima.data() + h * chunks;
    const float top = *std::max_element(m, m + chunks);
    float* out = a.out + h * d;
    std::fill_n(out, d, 0.0f);
    if (top == -INFINITY) continue;
    float denominator = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      weight[std::size_t(c)] = std::exp(m[c] - top);
      denominator += weight[std::size_t(c)] * totals[std::size_t(h * chunks + c)];
    }
    for (int64_t c = 0; c < chunks; ++c) {
      const float w = weight[std::size_t(c)] / denominator;
      const float* acc = partial.data() + std::size_t(h * chunks + c) * std::size_t(d);
      for (int64_t e = 0; e < d; ++e) out[e] += w * acc[e];
    }
  }
}

}  // namespace qvl::cpu
