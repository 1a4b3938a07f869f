// The output head's greedy pick from its bounds copy (kernels/head_bounds.cuh): prepare_head_pick makes the copy,
// project_then_pick runs the two kernels in place of the head's GEMV and the greedy pick, where the copy is this
// head's and the projection is one row.
#include "backend/op_costs.h"
#include "common.cuh"
#include "core/error.h"
#include "cuda_backend.h"
#include "head_bounds.cuh"

namespace qvl {

static_assert(cuda::kHeadBoundsGroup == 128 && cuda::kHeadBoundsMaxWidth == 4096,
              "head_bounds_bytes (backend.cpp) counts the copy the kernels make");

bool CudaBackend::prepare_head_pick(const LinearWeights& head) {
  const Tensor& w = head.weight;
  if (head.quantised() || head.bias.raw() || w.device() != Device::CUDA || w.rank() != 2 ||
      !cuda::head_bounds_fit(weight_type(w.dtype()), head.cols()))
    return false;
  HeadBounds bounds;
  const int64_t rows = head.rows(), width = head.cols();
  bounds.values = ctx_.device_tensor(DType::I8, {rows, width}, pool::Owner::Weights);
  bounds.scales = ctx_.device_tensor(DType::F32, {rows, (width + cuda::kHeadBoundsGroup - 1) / cuda::kHeadBoundsGroup},
                                     pool::Owner::Weights);
  bounds.workspace = ctx_.device_tensor(DType::U8, {cuda::head_bounds_workspace_bytes()}, pool::Owner::Workspace);
  CUDA_CHECK(cudaMemsetAsync(bounds.workspace.raw(), 0, bounds.workspace.nbytes(), ctx_.stream));
  bounds.copy = {.weight = w.raw(), .w_type = weight_type(w.dtype()), .values = bounds.values.data<int8_t>(),
                 .scales = bounds.scales.data<float>(), .rows = rows, .width = width};
  cuda::make_head_bounds(bounds.copy, ctx_.stream);
  head_bounds_ = std::move(bounds);
  return true;
}

void CudaBackend::project_then_pick(const Projection& head, int64_t vocabulary, Tensor& pick) {
  check_projection(head);
  const LinearWeights& w = *head.weights[0];
  const bool bounded = fusions_.bounded_head_pick && head_bounds_ && head_bounds_->copy.weight == w.weight.raw() &&
                       head.epilogue == Epilogue::Store && head.count == 1 && head.rows() == 1 && !w.bias.raw();
  if (!bounded) return Backend::project_then_pick(head, vocabulary, pick);
  Tensor& logits = *head.outputs[0];
  check_greedy_pick(logits, vocabulary, pick);
  const Tensor& in = unfused_prologue(*this, head);  // the head's norm: its own kernel, as the head's GEMV reads it
  if (in.dtype() != DType::F32 || logits.device() != Device::CUDA) return Backend::project_then_pick(head, vocabulary, pick);
  const GpuTimer timer = timed([&] {
    return op_cost::make("head bounds+pick", double(head_bounds_->values.nbytes() + head_bounds_->scales.nbytes()),
                         2.0 * double(vocabulary) * double(w.cols()));
  });
  cuda::head_bounds_pick({.x = f32(in), .copy = head_bounds_->copy, .vocabulary = vocabulary, .logits = f32(logits),
                          .pick = pick.data<int64_t>(), .workspace = head_bounds_->workspace.raw(),
                          .multiprocessors = ctx_.multiprocessors},
                         ctx_.overlapped_launches, ctx_.stream);
}

}  // namespace qvl
