#pragma once
// The output head's greedy pick and top-k's candidates on the CPU without every logit (CpuBackend's
// project_then_pick and project_then_top_k): kernels/head_bounds.cuh's method, copy and bound, over the threads.
//
// Why here too: a CPU decode step is bound by the bytes it reads, and a bf16 head is the largest matrix of it (the
// 2B's tied 151,936 x 2048 table: 622 MB of 3.44 GB). Its int8 copy with an f32 scale per 128 values is 321 MB
// (head_bounds_bytes). One pass over the copy gives each row a product a and a bound b with the head's own product
// within a ± b (head_bounds.cu derives b = 0.6 Σ s·H for sums of up to 4,096 products in any order, which covers
// these loops and the CPU's dot kernels as it does the GPU's); the rows whose upper bound is below the k-th largest
// of the blocks' largest lower bounds (k = 1 greedy, top-k's k) cannot be picked, and the rest are computed from the
// head itself with the dot kernel the head's product runs, so their logits are its bits. A quantised head (q8/q4:
// already 8 bits or fewer a weight) has no copy: a coarser one bounds too loosely to leave few rows.
#include <cstdint>
#include <optional>

#include "core/first_max.h"
#include "core/tensor.h"

namespace qvl::cpu {

constexpr int64_t kHeadBoundsGroup = 128;  // values a scale (head_bounds_bytes counts the same copy on both backends)

struct HeadBoundsCopy {
  Tensor block;  // head_bounds_bytes(rows, width): int8 values [rows, width], then f32 scales
  Tensor head;   // the head it was made from, [rows, width], kept alive (its address is not reused while the copy is)
  int64_t rows = 0, width = 0;

  const void* weight() const { return head.raw(); }
  DType w_type() const { return head.dtype(); }
  int64_t groups() const { return (width + kHeadBoundsGroup - 1) / kHeadBoundsGroup; }
  const int8_t* values() const { return block.data<int8_t>(); }
  // [rows, groups]: a group's largest |w| / 127; +inf where a value is not finite or the scale not a normal float
  // (that group's row is then always a candidate).
  const float* scales() const { return reinterpret_cast<const float*>(block.data<int8_t>() + rows * width); }
};

// The copy of `head` (f32, f16 or bf16 [rows, width], head_bounds_bytes(rows, width) > 0: a width that is a multiple
// of 16 up to 4,096), made over the threads onto huge pages where offered (huge_pages.h), with the values the CUDA
// copy holds. nullopt for a head it does not take, where the copy would leave the machine less than a quarter of its
// memory (room_for_copy), or where the dot kernels are the plain C++ ones (bound_rows()).
std::optional<HeadBoundsCopy> make_head_bounds(const Tensor& head);

struct HeadBoundsPick {
  const float* x = nullptr;  // [width], the head's input
  const HeadBoundsCopy* copy = nullptr;
  int64_t vocabulary = 0;    // the pick is over rows [0, vocabulary), vocabulary <= rows
  // [vocabulary]: afterwards each row's upper bound, and the logit itself where it was computed; top-k: the
  // candidates' logits and -inf elsewhere, which top_k_candidates reads as it reads every logit.
  float* logits = nullptr;
  int top_k = 0;  // 0: greedy; else top-k's k, compared at the temperature as core/top_k.h rounds
  double temperature = 1;
};

// Greedy: first_max over the logits the head's product gives (the first index of the largest; the NaN flag). Top-k:
// fills `logits` as above and returns {}.
FirstMax head_bounds_pick(const HeadBoundsPick& args);

// ---- The bounds pass, per instruction set (chosen with the dot kernels; tests run each) ----

struct BoundRows {
  const int8_t* values = nullptr;  // the copy's rows [begin, end)
  const float* scales = nullptr;   // their scales, `groups` a row
  const float* x = nullptr;        // [width]
  const float* magnitudes = nullptr;  // [groups]: Σ |x| over each group
  int64_t width = 0, groups = 0;
  int64_t begin = 0, end = 0;
  float* upper = nullptr;  // upper[r] for r in [begin, end): a + b, +inf where the row bounds nothing
};
// Writes each row's upper bound and returns the largest lower bound (a - b) of the rows that bound (-inf if none).
using BoundRowsFn = float (*)(const BoundRows&);
BoundRowsFn bound_rows_generic();  // the reference the tests hold the others to
BoundRowsFn bound_rows_avx2();     // nullptr without AVX2/FMA
BoundRowsFn bound_rows_avx512();   // nullptr without AVX-512F
// The dot kernels' instruction set's pass; nullptr where they are the plain C++ ones. The plain pass is slower than
// the plain head product it would replace (the 2B's head on this project's machine: 86-91 against 47-48 ms), so a
// processor without AVX2 computes every logit.
BoundRowsFn bound_rows();

}  // namespace qvl::cpu
