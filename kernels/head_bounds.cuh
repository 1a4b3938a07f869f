#pragma once
// The pick on the device from the output head without every logit (Backend::project_then_pick and project_then_top_k
// on CUDA): greedy, and top-k's candidates (below).
//
// The head is the largest matrix a decode step reads (the 2B's tied 151,936 x 2048 table: 622 MB of 3.44 GB in bf16),
// yet greedy decoding keeps one of its rows' products. A copy of the head in int8 with an f32 scale per 128 values
// (values[r, i] = rint(w[r, i] / s), s = max |w| of the group / 127: 321 MB for the 2B) gives, in one pass over half
// the bytes, each row's product a and a bound b on how far the head's own product can lie from it, so that
//   logit[r] <= upper[r] = a[r] + b[r]   and   logit[r] >= a[r] - b[r]
// hold for the logits the head's GEMV computes (bounds_kernel's comment derives b). With L the largest a[r] - b[r], a
// row whose upper bound is below L cannot be the largest logit; the rows that may (53 of 151,936 with random 2B weights and inputs in the op test) are
// computed again from the head itself, in the GEMV's order (the same bits), and the first index of their largest is
// the pick the whole row would give. NaN anywhere makes every row a candidate, so the NaN flag and the pick stay
// those of the whole row.
//
// Two launches, as the head's GEMV and the greedy pick were: the bounds (every row) with the largest lower bound
// merged by the last block, then the candidates' products and the pick. Afterwards `logits` holds the upper bounds,
// and the exact logit at every candidate row: no row's entry is below its logit.
//
// Top-k (sampling's candidates, top_k_candidates.cu after it): the k-th largest logit is at least the k-th largest of
// the blocks' largest lower bounds (k blocks each hold a row at or above it), so a row whose upper bound, over the
// temperature as top-k rounds it, is below that threshold's cannot be among the candidates, nor tie with the k-th.
// The candidates' logits are computed, every other entry set to -inf (which top-k leaves out): top-k over that row
// finds the candidates, values and draw it finds over all the logits.
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_type.h"

namespace qvl::cuda {

constexpr int64_t kHeadBoundsGroup = 128;     // values a scale
constexpr int64_t kHeadBoundsMaxWidth = 4096;  // the input width the bounds pass holds in registers

// Whether a head of this width and type has a bounds copy: bf16 or f16, the width a multiple of 16 up to 4,096.
bool head_bounds_fit(WeightType w_type, int64_t width);

struct HeadBoundsCopy {
  const void* weight = nullptr;  // the head [rows, width] it was made from
  WeightType w_type = WeightType::BF16;
  int8_t* values = nullptr;      // [rows, width]
  float* scales = nullptr;       // [rows, groups of 128 (the last may be shorter)]; +inf for a group with a value
                                 // not finite, or all too small to scale
  int64_t rows = 0, width = 0;
};

// Fills copy.values and copy.scales from copy.weight.
void make_head_bounds(const HeadBoundsCopy& copy, cudaStream_t stream);

struct HeadBoundsPickArgs {
  const float* x;      // [width], the head's (normed) input
  HeadBoundsCopy copy;
  int64_t vocabulary;  // the pick is over rows [0, vocabulary)
  float* logits;       // [vocabulary] at least: the upper bounds, the candidates' logits
  int64_t* pick;       // {first index of the largest logit, 1 if any logit is NaN}
  void* workspace;     // head_bounds_workspace_bytes(), zeroed once; every call leaves it zeroed again
  int multiprocessors;
  // 0: greedy, the pick into `pick`. Else top-k (<= 64) at `temperature`: `logits` gets the candidates' logits and
  // -inf elsewhere, for top_k_candidates; `pick` is not written.
  int top_k = 0;
  double temperature = 1;
};

int64_t head_bounds_workspace_bytes();

void head_bounds_pick(const HeadBoundsPickArgs& args, bool overlap, cudaStream_t stream);

}  // namespace qvl::cuda
