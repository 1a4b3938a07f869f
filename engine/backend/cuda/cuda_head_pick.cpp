// The output head's greedy pick and top-k from its bounds copy (kernels/head_bounds.cuh): prepare_head_pick makes the
// copy; project_then_pick runs the two kernels in place of the head's GEMV and the greedy pick, project_then_top_k in
// place of the GEMV before top_k_candidates, where the copy is this head's and the projection is one row.
#include "backend/op_costs.h"
#include "common.cuh"
#include "core/error.h"
#include "cuda_backend.h"
#include "head_bounds.cuh"

namespace qvl {

static_assert(cuda::kHeadBoundsGroup == 128 && cuda::kHeadBoundsMaxWidth == 4096,
              "head_bounds_bytes (backend.cpp) counts the copy the kernels make");

bool CudaBackend::prepare_head_pick(const LinearWeights& head) {
  head_bounds_.reset();  // a copy of another head must not outlive this call
  const Tensor& w = head.weight;
  if (head.quantised() || head.bias.raw() || w.device() != Device::CUDA || w.rank() != 2 ||
      !cuda::head_bounds_fit(weight_type(w.dtype()), head.cols()))
    return false;
  HeadBounds bounds;
  bounds.head = w;
  const int64_t rows = head.rows(), width = head.cols();
  const int64_t groups = (width + cuda::kHeadBoundsGroup - 1) / cuda::kHeadBoundsGroup;
  // One block, as the memory plan counts it (head_bounds_bytes): the values, then the scales (16-byte aligned: the
  // width is a multiple of 16).
  bounds.block = ctx_.device_tensor(DType::U8, {int64_t(head_bounds_bytes(rows, width))}, pool::Owner::Weights);
  bounds.workspace = ctx_.device_tensor(DType::U8, {cuda::head_bounds_workspace_bytes()}, pool::Owner::Workspace);
  CUDA_CHECK(cudaMemsetAsync(bounds.workspace.raw(), 0, bounds.workspace.nbytes(), ctx_.stream));
  bounds.copy = {.weight = w.raw(), .w_type = weight_type(w.dtype()),
                 .values = bounds.block.reinterpreted(DType::I8, {rows, width}, 0).data<int8_t>(),
                 .scales = bounds.block.reinterpreted(DType::F32, {rows, groups}, std::size_t(rows * width)).data<float>(),
                 .rows = rows, .width = width};
  cuda::make_head_bounds(bounds.copy, ctx_.stream);
  head_bounds_ = std::move(bounds);
  return true;
}

bool CudaBackend::picks_from_bounds_of(const LinearWeights& head) const {
  return fusions_.bounded_head_pick && head_bounds_ && head_bounds_->copy.weight == head.weight.raw();
}

// Whether the head's projection can run from the bounds copy: the switch on, the copy this head's, one row, no bias.
bool CudaBackend::picks_from_bounds(const Projection& head) const {
  check_projection(head);
  const LinearWeights& w = *head.weights[0];
  return picks_from_bounds_of(w) && head.epilogue == Epilogue::Store && head.count == 1 && head.rows() == 1 &&
         !w.bias.raw() && head.outputs[0]->device() == Device::CUDA;
}

// The head's norm (its own kernel, as the head's GEMV reads it), then the two kernels: greedy (top_k 0) into `pick`,
// or top-k's candidates' logits (the rest -inf) for top_k_candidates.
void CudaBackend::bounded_head(const Projection& head, int64_t vocabulary, int top_k, double temperature, Tensor* pick) {
  const Tensor& in = unfused_prologue(*this, head);
  if (in.dtype() != DType::F32) fail("the output head's bounded pick reads f32 rows, not ", dtype_name(in.dtype()));
  const GpuTimer timer = timed([&] {
    return op_cost::make("head bounds+pick", double(head_bounds_->block.nbytes()),
                         2.0 * double(vocabulary) * double(head.weights[0]->cols()));
  });
  cuda::head_bounds_pick({.x = f32(in), .copy = head_bounds_->copy, .vocabulary = vocabulary,
                          .logits = f32(*head.outputs[0]), .pick = pick ? pick->data<int64_t>() : nullptr,
                          .workspace = head_bounds_->workspace.raw(), .multiprocessors = ctx_.multiprocessors,
                          .top_k = top_k, .temperature = temperature},
                         ctx_.overlapped_launches, ctx_.stream);
}

void CudaBackend::project_then_pick(const Projection& head, int64_t vocabulary, Tensor& pick) {
  if (!picks_from_bounds(head)) return Backend::project_then_pick(head, vocabulary, pick);
  check_greedy_pick(*head.outputs[0], vocabulary, pick);
  bounded_head(head, vocabulary, 0, 1.0, &pick);
}

void CudaBackend::project_then_top_k(const Projection& head, const TopKSpec& spec, Tensor& out) {
  if (!picks_from_bounds(head)) return Backend::project_then_top_k(head, spec, out);
  check_top_k_candidates(*head.outputs[0], spec, out);
  bounded_head(head, spec.vocabulary, int(spec.top_k), spec.temperature, nullptr);
  top_k_candidates(*head.outputs[0], spec, out);
}

}  // namespace qvl
