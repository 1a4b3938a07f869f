#pragma once
// Attention for a single query row (a decode step) on the CPU. The general loop (cpu_backend.cpp) transposes tiles of
// keys for blocks of 64 queries; for one query that transpose cost more than the scores it saved (the 2B's decode
// attention took 135 µs a layer at 80 keys on the 2-core machine, 42 µs at 16 threads of the GPU machine's host).
// Here the keys and values are read as stored, in blocks of positions with all of a task's kv heads, each kv head's
// rows taken by the query heads that share it in one pass of the row kernels (a pair at a time). Long contexts are
// cut into chunks across the threads (a partial softmax a chunk, merged by their maxima), and where the chunks are
// fewer than the threads the kv heads are cut into groups as well.
#include <atomic>
#include <cstdint>

#include "core/dtype.h"

namespace qvl::cpu {

struct DecodeAttention {
  const float* q = nullptr;  // [heads, d]
  const void* k = nullptr;  // the cache: key t of kv head h at element (t * kv_heads + h) * d
  const void* v = nullptr;  // the values, laid out as the keys
  DType type = DType::F32;  // of the keys and values: f32 or bf16 (half the bytes a step reads)
  int64_t heads = 0, kv_heads = 0, d = 0;  // query head h reads kv head h / (heads / kv_heads)
  int64_t first_key = 0, end_key = 0;      // the visible keys
  float scale = 1;                         // of the scores, before the softmax
  float* out = nullptr;                    // [heads, d]
  int64_t chunks = 0;       // what the keys are cut into; 0: one a thread, none under 256 keys
  int64_t head_groups = 0;  // what the kv heads are cut into (at most); 0: enough for a task a thread
  const std::atomic<bool>* stop = nullptr;  // when set, ends between chunks (the output is then garbage)
};

void decode_attention(const DecodeAttention& a);

}  // namespace qvl::cpu
