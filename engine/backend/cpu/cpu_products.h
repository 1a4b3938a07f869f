#pragma once
// The CPU's matrix products over the thread pool: y = x · wᵀ (+ bias), the weight rows in chunks of 64 from a counter
// (whichever thread is free takes the next), each chunk reused for every activation row: bf16 weights against 32 rows
// or more (AVX2: 64) as the packed GEMM (gemm_kernels.h, x packed once for every matrix that reads it; on processors
// with AVX2), fewer rows, the other formats and processors without AVX2 as dot tiles (blocks of 64 rows keep x in
// cache).
//
// Several matrices reading the same x (q, k and v) run as one loop over their rows together: x quantised once where
// the weights are q8/q4, and one hand-over to the threads instead of three. On the GPU machine's host at 16 threads
// a decode step's k and v products (1.2 MB each at q4) took 21 µs where their bytes take ~12, and the hand-over
// itself 2.5-3 µs. Gate and up (SwiGLU) likewise, each thread applying SiLU(gate) ⊙ up to its own chunk as soon as
// it has both (no pass of its own). Each output element is computed exactly as the single product computes
// it, so the fused loops give the unfused bits.
#include <atomic>
#include <span>

#include "backend/weight_format.h"
#include "core/tensor.h"

namespace qvl::cpu {

struct ProductOutput {
  const LinearWeights* weights = nullptr;
  float* y = nullptr;  // [rows of x, rows of the weights]
};

// y_i = x · w_iᵀ (+ b_i) for every output, x an f32 [m, k] (any shape whose last dimension is k). `stop`, when set,
// ends the products between blocks of 64 activation rows (a stopped prefill); the outputs are then garbage.
void products(const Tensor& x, std::span<const ProductOutput> outputs, const std::atomic<bool>* stop);

// y = silu(x · gateᵀ) ⊙ (x · upᵀ), y and up_product [m, rows of gate] (up_product holds the up product).
void swiglu_product(const Tensor& x, const LinearWeights& gate, const LinearWeights& up, float* y, float* up_product,
                    const std::atomic<bool>* stop);

// How a q8/q4 decode (one activation row) reads each chunk of weight rows: in order, or as kReadStreams runs
// (memory_bandwidth.h), which drew up to twice the bandwidth on the GPU machine's Xeon and lost ~15% on this
// project's 2-core EPYC. Automatic: the process measures both on a q8/q4 output head's second one-row product and
// keeps the faster (a model with a float head, or whose one-row products all read q8 tiles (q8_tiles.h: always in
// order), never measures and keeps the order); InOrder or Runs once measured, or
// when set (tests; comparing the two on a machine). The bits are the same either way.
enum class DecodeReadOrder { Automatic, InOrder, Runs };
void set_decode_read_order(DecodeReadOrder order);
DecodeReadOrder decode_read_order();

}  // namespace qvl::cpu
