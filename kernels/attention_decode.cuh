#pragma once
// Decode attention for the shapes models decode with (attention_decode.cu): split over the keys like attention.cu's
// split kernel, but a warp takes a tile of keys for every query head of one kv head, so each key and value row
// crosses DRAM once however many query heads share it (GQA), and loads whole 16-byte pieces of rows into registers.
// attention() runs it for split_keys where it fits, attention.cu's split kernel otherwise.
#include <cuda_runtime.h>

#include <cstdint>

#include "attention.cuh"

namespace qvl::cuda {

// Rows of 128, 256 or 512 bytes (bf16 head sizes 64, 128, 256; f32 32, 64, 128), 1, 2, 4 or 8 query heads per kv
// head, 16-byte aligned q, k and v, no block layout.
bool attention_decode_fits(const AttentionArgs& a);
// Floats of workspace (0: one chunk, nothing to merge).
int64_t attention_decode_workspace(const AttentionArgs& a, int multiprocessors);
void attention_decode(const AttentionArgs& a, const SplitDecode& split, cudaStream_t stream);

}  // namespace qvl::cuda
