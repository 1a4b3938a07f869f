#include "backend/cpu/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "core/cancel.h"
#include "core/thread_pool.h"

namespace qvl::cpu {
namespace {

// The fewest keys worth a chunk of their own: 256 keys at d = 128 are 256 KB of keys and values a kv head in f32
// (128 KB in bf16), tens of microseconds of work against a hand-over of a few.
constexpr int64_t kMinChunkKeys = 256;
// Positions a block: the block's keys (then values) of the task's kv heads, read in the order they are stored. At the
// 2B's shapes a position's 8 kv heads are 4 KB in f32 (2 KB in bf16), so a block's keys are 128 KB (64 KB), meant to
// stay in L2; the row kernels take each kv head's rows for its query heads (a pair at a time) in one pass.
constexpr int64_t kBlockKeys = 32;

}  // namespace

void decode_attention(const DecodeAttention& a) {
  const int64_t group = a.heads / a.kv_heads, span = std::max<int64_t>(0, a.end_key - a.first_key), d = a.d;
  auto& pool = ThreadPool::global();
  const int64_t threads = int64_t(pool.size());
  // The keys cut into chunks, one a thread where there are enough of them (none shorter than kMinChunkKeys); the kv
  // heads into as many groups as it takes for every thread to have a task. A task reads the rows of its chunk with
  // all its kv heads, so a long context is read from memory in the order it is stored: a task a kv head read 256-
  // or 512-byte pieces 2 or 4 KB apart, which on this project's 2-core machine drew 8.6-8.7 GB/s from a bf16 cache and
  // 12-13 from an f32 one (docs/performance.md, "The CPU's KV cache in bf16").
  const int64_t chunks = a.chunks > 0 ? a.chunks : std::max<int64_t>(1, std::min(threads, span / kMinChunkKeys));
  const int64_t wanted = std::min(a.kv_heads, a.head_groups > 0 ? a.head_groups : (threads + chunks - 1) / chunks);
  const int64_t kv_per_task = (a.kv_heads + wanted - 1) / wanted;
  const int64_t head_groups = (a.kv_heads + kv_per_task - 1) / kv_per_task;  // none left empty by the rounding
  const int64_t chunk = (span + chunks - 1) / chunks;
  // Each (query head, chunk): its largest scaled score, its sum of exponentials and its unnormalised weighted values.
  std::vector<float> maxima(std::size_t(a.heads * chunks), -INFINITY), totals(maxima.size(), 0.0f),
      partial(maxima.size() * std::size_t(d), 0.0f);
  const auto& kernels = attention_kernels();
  const CacheRowKernels& rows = kernels.rows(a.type);
  const std::size_t stride = std::size_t(a.kv_heads * d), element = dtype_size(a.type);
  // Key or value row t (a position) of kv head h.
  const auto at = [&](const void* base, int64_t t, int64_t h) {
    return static_cast<const char*>(base) + (std::size_t(t) * stride + std::size_t(h * d)) * element;
  };
  pool.parallel_for(std::size_t(head_groups * chunks), 1, [&](std::size_t begin, std::size_t end) {
    std::vector<float> scores(static_cast<std::size_t>(kv_per_task * group * chunk)), block_out(static_cast<std::size_t>(group * d));
    for (std::size_t task = begin; task < end; ++task) {
      if (stop_requested(a.stop)) return;
      const int64_t c = int64_t(task) % chunks, kv0 = int64_t(task) / chunks * kv_per_task;
      const int64_t kv1 = std::min(a.kv_heads, kv0 + kv_per_task);
      const int64_t t0 = a.first_key + c * chunk, n = std::min(a.end_key, t0 + chunk) - t0;
      if (n <= 0) continue;  // the last chunks of a span that does not divide evenly
      const int64_t h0 = kv0 * group, heads = (kv1 - kv0) * group;  // the task's query heads, [h0, h0 + heads)
      float* const head_scores = scores.data();                      // [heads][n]
      for (int64_t b = 0; b < n; b += kBlockKeys)
        for (int64_t kvh = kv0; kvh < kv1; ++kvh)  // the group's query heads in one call: each key loaded once
          rows.score_rows(a.q + kvh * group * d, std::size_t(group), at(a.k, t0 + b, kvh),
                          std::size_t(std::min(kBlockKeys, n - b)), stride, std::size_t(d),
                          head_scores + (kvh - kv0) * group * n + b, std::size_t(n));
      for (int64_t h = 0; h < heads; ++h) {
        float* const row = head_scores + h * n;
        const std::size_t slot = std::size_t((h0 + h) * chunks + c);
        const float best = kernels.max_scaled(row, std::size_t(n), a.scale);
        totals[slot] = kernels.exp_scaled(row, std::size_t(n), a.scale, best);
        maxima[slot] = best;
      }
      for (int64_t b = 0; b < n; b += kBlockKeys)
        for (int64_t kvh = kv0; kvh < kv1; ++kvh) {
          rows.weighted_rows(head_scores + (kvh - kv0) * group * n + b, std::size_t(group), std::size_t(n),
                             at(a.v, t0 + b, kvh), std::size_t(std::min(kBlockKeys, n - b)), stride, std::size_t(d),
                             block_out.data());
          for (int64_t g = 0; g < group; ++g) {
            float* const acc = partial.data() + std::size_t((kvh * group + g) * chunks + c) * std::size_t(d);
            for (int64_t e = 0; e < d; ++e) acc[e] += block_out[std::size_t(g * d + e)];
          }
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
