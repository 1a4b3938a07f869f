#pragma once
// Flash attention on tensor cores (SM80+), the native profile's kernel for many queries (prefill, the vision tower).
// Same contract as flash_attention (flash_attention.cuh): out [S, Hq, D] = softmax(q·kᵀ·scale + mask)·v, causal
// (with `past` earlier keys) or block-diagonal segments (`bounds` on the device, S + 1 ascending entries), GQA by
// head / group. q, k, v and p are rounded to f16 for the products; sums and the softmax stay f32, and so does the
// output, or it is written as the 16-bit operand of the product that reads it (AttentionArgs::operand).
// Causal may be block-sparse: `layout` (on the device, layout_side² entries, 0/1) says which 64-key block each
// 64-position query block sees (AttentionMask::block_layout); blocks it hides are skipped, loads included.
#include <cuda_runtime.h>

#include <cstdint>

#include "flash_attention.cuh"  // kFlashLayoutBlock

namespace qvl::cuda {

// Whether the current device runs this kernel: compute capability 8.0 or newer and a build that holds SM80+ code
// for it (a build for older architectures has no tensor-core body). Ask once per device.
bool flash_attention_mma_available();
// The head sizes it takes: multiples of 16 up to 128.
bool flash_attention_mma_fits(int64_t d);
// `multiprocessors`: the device's SM count (the block size is chosen to fill them).
void flash_attention_mma(const AttentionArgs& a, int multiprocessors, cudaStream_t stream);

}  // namespace qvl::cuda
