// Recording is stream capture into a CUDA graph; every tensor allocated meanwhile stays with the graph (its kernels
// keep using those addresses on every replay).
#include <exception>
#include <utility>

#include "backend/op_costs.h"
#include "barrier.cuh"
#include "common.cuh"
#include "core/error.h"
#include "cuda_backend.h"
#include "step_handoff.cuh"

namespace qvl {

namespace {

struct Graph final : RecordedWork {
  cudaGraphExec_t exec = nullptr;
  std::vector<Tensor> tensors;
  uint64_t held = 0;  // the tensors' pool blocks (a request rounded up, or a block the pool left whole)
  ~Graph() override {
    if (exec) cudaGraphExecDestroy(exec);
  }
  uint64_t bytes() const override { return held; }
};

}  // namespace

// Per-kernel timing needs events around each op: the ops run directly then.
bool CudaBackend::can_record() const { return !timer_.sink() && !ctx_.recording; }

bool CudaBackend::begin_recording(RecordedUploads uploads) {
  if (!can_record()) return false;
  // Fixed uploads are copied at once, beside the stream: the pool may hand them memory that work still queued on
  // the stream reads (freed in stream order), so that work finishes first. Recording is rare (once a picture size).
  if (uploads == RecordedUploads::Fixed) CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  CUDA_CHECK(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeRelaxed));
  ctx_.recording = true;
  ctx_.recording_keeps_uploads = uploads == RecordedUploads::Fixed;
  closing_handoff_.reset();
  ctx_.recorded_tensors.clear();
  return true;
}

std::shared_ptr<RecordedWork> CudaBackend::end_recording() {
  if (!ctx_.recording) return nullptr;
  ctx_.recording = false;
  // Taken first: should ending the capture fail, they go with this call, not with the next recording.
  std::vector<Tensor> tensors = std::move(ctx_.recorded_tensors);
  ctx_.recorded_tensors.clear();
  // A pageable copy returns once its data is staged, not landed (CUDA's "API synchronization behavior"): the kept
  // uploads are waited for on the legacy stream they went through before any replay reads them.
  const bool kept_uploads = std::exchange(ctx_.recording_keeps_uploads, false);
  // The graph is done when its last kernel is, not when that kernel lets others start: it ends with a kernel
  // launched the plain way, which starts once every kernel before it has finished and lets nothing start early. A
  // step's hand-off is such a kernel; else an empty one.
  std::exception_ptr closing_failed;
  try {
    if (closing_handoff_) cuda::step_handoff(*closing_handoff_, ctx_.stream);
    else cuda::barrier(ctx_.stream);
  } catch (...) {
    closing_failed = std::current_exception();
  }
  closing_handoff_.reset();
  // The capture ends and the kept uploads land whatever failed: a stream left capturing would take the next work.
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(ctx_.stream, &graph);
  const cudaError_t landed = kept_uploads ? cudaStreamSynchronize(cudaStreamLegacy) : cudaSuccess;
  if (closing_failed || ended != cudaSuccess || landed != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    if (closing_failed) std::rethrow_exception(closing_failed);
    CUDA_CHECK(ended);
    CUDA_CHECK(landed);
  }
  auto work = std::make_shared<Graph>();
  work->tensors = std::move(tensors);
  for (const Tensor& t : work->tensors) work->held += ctx_.pool->block_bytes(t.raw());
  // WithFlags: the one spelling CUDA 11 (the Pascal build) and CUDA 12+ share.
  const cudaError_t e = cudaGraphInstantiateWithFlags(&work->exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(e);
  return work;
}

void CudaBackend::replay(const RecordedWork& work) {
  const auto* graph = dynamic_cast<const Graph*>(&work);
  if (!graph) fail("CUDA backend: replay of work recorded by another backend");
  CUDA_CHECK(cudaGraphLaunch(graph->exec, ctx_.stream));
}

void CudaBackend::hand_off_step(const StepHandoff& op) {
  check_step_handoff(op);
  if (op.pick->device() != Device::CUDA) fail("hand_off_step: the pick must be on the GPU");
  void* handed = nullptr;  // the mapped memory's address for the device (the host's own where addressing is unified)
  CUDA_CHECK(cudaHostGetDevicePointer(&handed, op.handed->raw(), 0));
  const cuda::StepHandoffArgs args{.pick = op.pick->data<int64_t>(),
                                   .pick_count = op.pick->numel(),
                                   .handed = static_cast<int64_t*>(handed),
                                   .handed_slots = op.handed->dim(0),
                                   .past = op.past->data<int64_t>(),
                                   .rotary = op.rotary->data<float>(),
                                   .rotary_rows = op.rotary->dim(0),
                                   .head_dim = op.rotary->dim(2),
                                   .cos = op.cos->data<float>(),
                                   .sin = op.sin->data<float>()};
  if (ctx_.recording) {  // the step's last op: it closes the graph (end_recording), where the empty kernel would
    closing_handoff_ = args;
    return;
  }
  const GpuTimer timer = timed([&] { return op_cost::make("step_handoff", double(op.pick->nbytes()), 0); });
  cuda::step_handoff(args, ctx_.stream);
}

}  // namespace qvl
