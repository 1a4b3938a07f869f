#pragma once
// Attention for a single query row (a decode step) on the CPU. The general loop (cpu_backend.cpp) transposes tiles of
// keys for blocks of 64 queries; for one query that transpose cost more than the scores it saved (the 2B's decode
// attention took 135 µs a layer at 80 keys on the 2-core machine, 42 µs at 16 threads of the GPU machine's host).
// Here each kv head's keys and values are read as stored, in blocks of rows that the query heads sharing them take
// in turn (so from cache after the first), and long contexts are cut into chunks across the threads (a partial
// softmax a chunk, merged by their maxima).
#include <atomic>
#include <cstdint>

namespace qvl::cpu {

struct DecodeAttention {
  const float* q = nullptr;  // [heads, d]
  const float* k = nullptr;  // the cache: key t of kv head h at k + (t * kv_heads + h) * d
  const float* v = nullptr;  // the values, laid out as the keys
  int64_t heads = 0, kv_heads = 0, d = 0;  // query head h reads kv head h / (heads / kv_heads)
  int64_t first_key = 0, end_key = 0;      // the visible keys
  float scale = 1;                         // of the scores, before the softmax
  float* out = nullptr;                    // [heads, d]
  int64_t chunks = 0;  // what each kv head's keys are cut into; 0: enough for every thread, none under 256 keys
  const std::atomic<bool>* stop = nullptr;  // when set, ends between chunks (the output is then garbage)
};

void decode_attention(const DecodeAttention& a);

}  // namespace qvl::cpu
