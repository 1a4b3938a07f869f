#pragma once
// A view's tap on the attention of a decode step: the newest query's probabilities over an image's cached rows
// (backend.h's AttentionTap says what; the CPU backend's attention_tap is the reference). Recorded inside the decode
// step, so the key count may come from the device.
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

struct AttentionTapArgs {
  const float* q = nullptr;        // [heads, head_dim]
  const void* cache_k = nullptr;   // [capacity, kv_heads, head_dim], f32 or bf16 (kv_bf16)
  bool kv_bf16 = false;
  int64_t kv_len = 0;
  const int64_t* past = nullptr;   // set: kv_len = min(*past + 1, capacity)
  int64_t capacity = 0;            // rows the cache holds
  int64_t first = 0, count = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  int head = -1;                   // -1: the mean of the heads
  float scale = 1;
  float* scores = nullptr;         // scratch: [heads used, count], the image rows' scores
  float* partials = nullptr;       // scratch: [heads used, attention_tap_splits(capacity), 2], each split's max and sum
  float* heat = nullptr;           // [count]: whole numbers 0..255
};

constexpr int kMaxTapHeads = 256;  // query heads the merge holds (checked by the backend)
// How many blocks a head's keys are split over, from the cache's capacity.
int attention_tap_splits(int64_t capacity);
void attention_tap(const AttentionTapArgs& args, cudaStream_t stream);

}  // namespace qvl::cuda
