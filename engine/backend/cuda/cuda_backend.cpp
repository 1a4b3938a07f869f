// The CUDA backend's services and memory: construction, the pool report, bandwidth, uploads and host copies, the
// plugin's entry point. The ops live in the files cuda_backend.h lists.
#include "cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "bandwidth.cuh"
#include "common.cuh"
#include "cuda_interop.h"
#include "core/error.h"
#include "core/half.h"
#include "fault.cuh"
#include "greedy_pick.cuh"
#include "top_k_candidates.cuh"
#include "plugin_abi.h"

namespace qvl {

namespace {

// bf16 -> f16 is exact for every value in f16's normal range; an overflow would turn a weight into inf.
Tensor checked_f16(const Tensor& bf16) {
  Tensor f16 = bf16.to(DType::F16);
  const auto* h = f16.data<uint16_t>();
  for (int64_t i = 0; i < f16.numel(); ++i)
    if ((h[i] & 0x7c00) == 0x7c00 && !std::isnan(bf16_to_f32(bf16.data<uint16_t>()[i])))
      fail("SM61 profile: a bf16 weight of ", bf16_to_f32(bf16.data<uint16_t>()[i]), " does not fit f16 storage");
  return f16;
}

}  // namespace

CudaBackend::CudaBackend(int device, std::size_t capacity, const std::string& profile)
    : ctx_(device, capacity ? capacity : SIZE_MAX, profile), timer_(ctx_.stream) {
  if (capacity == 0) {
    // No budget given: what the driver has free now (the context made), less a reserve for the display, cuBLAS's
    // own workspace and graph memory, which the pool does not see.
    std::size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    ctx_.pool->set_capacity(free > kOutsidePoolReserve ? free - kOutsidePoolReserve : 0);
  }
  attention_arrivals_ = ctx_.device_tensor(DType::I32, {ctx_.profile->split_below_pairs_per_sm * ctx_.multiprocessors},
                                           pool::Owner::Workspace);
  CUDA_CHECK(cudaMemsetAsync(attention_arrivals_.raw(), 0, attention_arrivals_.nbytes(), ctx_.stream));
  greedy_pick_workspace_ = ctx_.device_tensor(DType::U8, {cuda::greedy_pick_workspace_bytes()}, pool::Owner::Workspace);
  CUDA_CHECK(cudaMemsetAsync(greedy_pick_workspace_.raw(), 0, greedy_pick_workspace_.nbytes(), ctx_.stream));
  top_k_workspace_ = ctx_.device_tensor(DType::U8, {cuda::top_k_candidates_workspace_bytes()}, pool::Owner::Workspace);
  CUDA_CHECK(cudaMemsetAsync(top_k_workspace_.raw(), 0, top_k_workspace_.nbytes(), ctx_.stream));
}

CudaBackend::~CudaBackend() = default;

BackendLimits CudaBackend::limits() const {
  return {ctx_.profile->flash_min_queries, ctx_.profile->gemm == cuda::GemmKernel::Cublas,
          cuda::top_k_candidates_max_count()};
}

std::optional<DeviceIdentity> CudaBackend::device_identity() const {
  return DeviceIdentity{ctx_.device_name, ctx_.device, ctx_.uuid};
}

DeviceInterop* CudaBackend::interop() {
  if (!interop_) interop_ = std::make_unique<CudaInterop>(ctx_);
  return interop_.get();
}

void CudaBackend::set_timing_sink(KernelTimingSink* sink) { timer_.set_sink(sink); }  // the timer holds the sink

QueueMark CudaBackend::mark() {
  if (ctx_.recording) fail("CUDA backend: a queue mark inside a recorded step");
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  std::shared_ptr<void> event(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  CUDA_CHECK(cudaEventRecord(e, ctx_.stream));
  return {std::move(event), std::chrono::steady_clock::now()};
}

double CudaBackend::elapsed_ms(const QueueMark& from, const QueueMark& to) {
  if (!from.event || !to.event) fail("CUDA backend: elapsed_ms between marks of another backend");
  const auto begin = static_cast<cudaEvent_t>(from.event.get()), end = static_cast<cudaEvent_t>(to.event.get());
  CUDA_CHECK(cudaEventSynchronize(end));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
  return ms;
}

std::string CudaBackend::device_error() {
  // Sticky errors (a kernel fault) poison the context: every later call returns them, so this is a reliable test.
  const cudaError_t e = cudaStreamSynchronize(ctx_.stream);
  if (e == cudaSuccess) return {};
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

void CudaBackend::inject_fault(const FaultInjection& fault) {
  ctx_.pool->fail_allocation(fault.out_of_memory_at);
  sampling_faults_ = fault;
  if (fault.lose_device) {  // a trap poisons the context for good, as a lost device does: every later call fails
    cuda::trap(ctx_.stream);
    cudaStreamSynchronize(ctx_.stream);
  }
}

double CudaBackend::measure_read_bandwidth() {
  // 2 GiB, far beyond the 50-60 MB L2 of current GPUs; less when a capped pool leaves less room.
  std::size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return cuda::measure_read_bandwidth(std::min<std::size_t>(std::size_t(2) << 30, free / 4 / 16 * 16), 5,
                                      ctx_.multiprocessors);
}

MemoryReport CudaBackend::memory_report(bool with_segment_map) const {
  const pool::Stats st = ctx_.pool->stats();
  MemoryReport r;
  r.available = true;
  r.capacity = ctx_.pool->capacity() == SIZE_MAX ? -1 : int64_t(ctx_.pool->capacity());
  r.requested = st.requested.current;
  r.allocated = st.allocated.current;
  r.allocated_peak = st.allocated.peak;
  r.reserved = st.reserved.current;
  r.reserved_peak = st.reserved.peak;
  r.fragmentation = st.inactive_split.current;
  r.active_blocks = st.active_blocks.current;
  r.segments = st.segments.current;
  r.alloc_count = st.alloc_count;
  r.free_count = st.free_count;
  r.oom_retries = st.oom_retries;
  for (const auto& [owner, bytes] : ctx_.pool->bytes_by_owner()) r.by_owner.emplace_back(pool::owner_name(owner), bytes);
  if (with_segment_map)
    for (const auto& seg : ctx_.pool->snapshot()) {
      MemoryReport::Segment out{int64_t(seg.size), {}};
      for (const auto& b : seg.blocks)
        out.blocks.push_back({int64_t(b.offset), int64_t(b.size), b.allocated, b.allocated ? pool::owner_name(b.owner) : ""});
      r.segment_map.push_back(std::move(out));
    }
  return r;
}

// Every role is stored as the checkpoint has it, but for the SM61 profile's f16 storage of bf16 (no bf16 there).
Tensor CudaBackend::upload(const Tensor& host, WeightRole) {
  if (host.device() == Device::CUDA) return host;
  const Tensor stored = as_stored(host);
  Tensor t = ctx_.device_tensor(stored.dtype(), stored.shape(), pool::Owner::Weights);
  ctx_.stage(t.raw(), stored.raw(), stored.nbytes());
  return t;
}

// Float matrices of one width and type, one after another in one allocation (a view each), so that a product of
// many rows reads them as one matrix (gemm_packed, gemm_swiglu_packed); anything else as Backend does.
std::vector<LinearWeights> CudaBackend::upload_linears(const std::vector<LinearWeights>& host) {
  bool together = host.size() > 1;
  int64_t rows = 0;
  for (const LinearWeights& w : host) {
    together = together && !w.quantised() && w.weight.rank() == 2 && w.weight.device() == Device::CPU &&
               w.weight.dtype() == host[0].weight.dtype() && w.cols() == host[0].cols();
    rows += w.rows();
  }
  if (!together) return Backend::upload_linears(host);
  const DType storage = weight_storage(host[0].weight.dtype());
  Tensor all = ctx_.device_tensor(storage, {rows, host[0].cols()}, pool::Owner::Weights);
  std::vector<LinearWeights> out;
  int64_t at = 0;
  for (const LinearWeights& w : host) {
    const Tensor stored = as_stored(w.weight);
    LinearWeights unit = w;
    unit.weight = all.slice_rows(at, at + w.rows());
    ctx_.stage(unit.weight.raw(), stored.raw(), stored.nbytes());
    unit.format = format_of(stored.dtype());
    if (w.bias.raw()) unit.bias = upload(w.bias, WeightRole::Vector);
    out.push_back(std::move(unit));
    at += w.rows();
  }
  return out;
}

Tensor CudaBackend::alloc(Shape shape) { return ctx_.device_tensor(DType::F32, std::move(shape), pool::Owner::Activations); }

Tensor CudaBackend::alloc_cache(Shape shape) { return ctx_.device_tensor(cache_type_, std::move(shape), pool::Owner::KvCache); }

void CudaBackend::set_cache_type(DType type) {
  if (type != DType::F32 && type != DType::BF16) fail(name(), ": a KV cache of f32 or bf16, not ", dtype_name(type));
  cache_type_ = type;
}

DType CudaBackend::weight_storage(DType stored) const {
  return ctx_.profile->weights_as_f16 && stored == DType::BF16 ? DType::F16 : stored;
}

// A host weight in the type weight_storage stores it in (the SM61 profile's f16 for bf16, range-checked).
Tensor CudaBackend::as_stored(const Tensor& host) const {
  return weight_storage(host.dtype()) != host.dtype() ? checked_f16(host) : host;
}

// cuBLAS reads 16-bit weights with activations narrowed to their type. Where the rows go to cuBLAS and the fusion
// that writes a product's input is on, that writer stores the operand directly, rounded as the conversion rounds
// (the same bits), and no product runs a conversion pass of its own: the type it writes, or nullopt (f32).
// One type for all of p's matrices, or none (f32 rows) where they would read different ones (a projection mixing
// quantised and float matrices, not in the model today, runs the reference's sequence: project_quantised).
std::optional<DType> CudaBackend::operand_type(const Projection& p, bool fused) const {
  const std::optional<DType> type = operand_type(*p.weights[0], p.rows(), fused);
  for (int i = 1; i < p.count; ++i)
    if (operand_type(*p.weights[std::size_t(i)], p.rows(), fused) != type) return std::nullopt;
  return type;
}
std::optional<DType> CudaBackend::operand_type(const LinearWeights& w, int64_t rows, bool fused) const {
  // Quantised matrices are widened for cuBLAS's products (project_dequantised): their operand is the widened type.
  const DType type = w.quantised() ? dequantised_type() : w.weight.dtype();
  const bool sixteen_bit = type == DType::BF16 || type == DType::F16;
  if (!fused || !sixteen_bit || !runs_cublas(rows)) return std::nullopt;
  return type;
}

// The norm slot: written by the norm (rms_norm+linear, layer_norm+linear).
Tensor CudaBackend::alloc_normed(Shape shape, const Projection& reader) {
  const bool layer = reader.norm.kind == RowNorm::Kind::Layer || reader.then_norm.kind == RowNorm::Kind::Layer;
  const std::optional<DType> type =
      operand_type(reader, layer ? fusions_.layer_norm_linear : fusions_.norm_into_projection);
  return ctx_.device_tensor(type.value_or(DType::F32), std::move(shape), pool::Owner::Activations);
}

// The attention's output [rows, heads, head_dim] for the o (vision: proj) product: its operand where the tensor-core
// attention will write it (prefill rows, a head size it takes); else f32. (CudaBackend::attention narrows another
// kernel's f32 result into a 16-bit slot all the same: a mask with the position on the device, fusions changed.)
Tensor CudaBackend::alloc_for_product(Shape shape, const LinearWeights& reader) {
  const int64_t rows = shape.empty() ? 0 : shape[0];
  const bool tensor_cores = fusions_.flash_attention && shape.size() == 3 && tensor_core_rows(rows, shape[2]);
  const std::optional<DType> type = operand_type(reader, rows, tensor_cores);
  return ctx_.device_tensor(type.value_or(DType::F32), std::move(shape), pool::Owner::Activations);
}

// f16 where the tensor-core attention reads them (the fused attention on, rows and a head size it takes) and the
// batched q+k+v product's bias + RoPE kernel writes them (the q+k+v fusion on; products() narrows another path's f32
// results into them all the same, and attention() widens them for another kernel): the same values the attention's
// tiles held when it widened f32 rows (bias_rope.cuh), half the bytes. Else f32. (The rows are the keys'; the tower's
// attention has as many queries.)
// The f16 values' pool block also holds the room for their f32 product after them (product_room), so the tower's 24
// layers share one: a workspace each was 154 MB more in a recording of a 448² picture, which holds every tensor its
// ops allocate (231 MiB held against 87).
Tensor CudaBackend::alloc_keys_values(Shape shape) {
  const bool f16 = fusions_.flash_attention && fusions_.qkv_projection && shape.size() == 3 &&
                   tensor_core_rows(shape[0], shape[2]);
  if (!f16) return ctx_.device_tensor(DType::F32, std::move(shape), pool::Owner::Activations);
  const int64_t count = shape_numel(shape);
  const Tensor block = ctx_.device_tensor(DType::F32, {int64_t(room_offset(count) / 4) + count}, pool::Owner::Activations);
  return block.reinterpreted(DType::F16, std::move(shape), 0);
}

// The f16 values' bytes rounded up to 16, where the f32 room after them starts.
std::size_t CudaBackend::room_offset(int64_t count) { return (std::size_t(count) * 2 + 15) / 16 * 16; }

// Where a 16-bit output's f32 product goes before it is narrowed: the room after its values in its pool block
// (alloc_keys_values), else `workspace`, allocated here. The block must be the one alloc_keys_values asks for y's
// values exactly (a view at the start of a larger tensor must not take its parent's values for room; a block the
// pool left larger goes to the workspace too).
float* CudaBackend::product_room(const Tensor& y, Tensor& workspace) {
  const std::size_t offset = room_offset(y.numel());
  if (ctx_.pool->block_bytes(y.raw()) == pool::MemoryPool::round_size(offset + std::size_t(y.numel()) * 4))
    return reinterpret_cast<float*>(static_cast<char*>(const_cast<void*>(y.raw())) + offset);
  workspace = ctx_.device_tensor(DType::F32, y.shape(), pool::Owner::Workspace);
  return f32(workspace);
}

// A SwiGLU or GELU activation slot: written by the activation kernel (swiglu_projection, linear_gelu) for the next
// projection, which has the same weight format (a checkpoint has one) and the same rows; else empty (outputs[0]).
Tensor CudaBackend::alloc_operand(Shape shape, const Projection& p) {
  const std::optional<DType> type =
      operand_type(p, p.epilogue == Epilogue::SwiGLU ? fusions_.swiglu_projection : fusions_.linear_gelu);
  return type ? ctx_.device_tensor(*type, std::move(shape), pool::Owner::Activations) : Tensor();
}

Tensor CudaBackend::from_host(const Tensor& host) {
  const Tensor src = host.dtype() == DType::F32 ? host : host.to(DType::F32);
  Tensor t = alloc(src.shape());
  ctx_.stage(t.raw(), src.raw(), src.nbytes());
  return t;
}

Tensor CudaBackend::to_host(const Tensor& t) {
  if (t.device() == Device::CPU) return t;
  Tensor h = Tensor::empty(t.dtype(), t.shape());
  if (ctx_.recording) fail("CUDA backend: a result cannot be read back while recording");
  ctx_.staging->download(h.raw(), t.raw(), t.nbytes(), ctx_.stream);
  return h;
}

std::unique_ptr<PendingRead> CudaBackend::read_later(const Tensor& t) {
  // Copied now: host memory the device does not write, or a device tensor larger than a slot.
  if (t.device() == Device::CPU && !handed_->owns(t.raw())) return Backend::read_later(t);
  if (t.device() != Device::CPU && t.nbytes() > PendingReads::kSlotBytes) return Backend::read_later(t);
  if (ctx_.recording) fail("CUDA backend: a result cannot be read back while recording");
  return pending_reads_.start(t, ctx_.stream);
}

// Page-locked and mapped: the device's stores reach it over the bus, with no copy queued (StepHandoff).
Tensor CudaBackend::alloc_handed(DType dtype, Shape shape) { return handed_->take(dtype, std::move(shape)); }

Tensor CudaBackend::alloc_indices(int64_t count) {
  return ctx_.device_tensor(DType::I64, {count}, pool::Owner::Activations);
}

void CudaBackend::write_indices(Tensor& dst, std::span<const int64_t> values) {
  if (dst.dtype() != DType::I64 || dst.numel() != int64_t(values.size())) fail("write_indices: sizes differ");
  ctx_.stage(dst.raw(), values.data(), values.size_bytes());
}

void CudaBackend::write(Tensor& dst, const Tensor& host) {
  if (dst.numel() != host.numel()) fail("write: sizes differ");
  const Tensor src = host.dtype() == DType::F32 ? host : host.to(DType::F32);
  ctx_.stage(f32(dst), src.raw(), src.nbytes());
}

Tensor CudaBackend::indices(std::span<const int64_t> values) {
  Tensor t = alloc_indices(int64_t(values.size()));
  write_indices(t, values);
  return t;
}

}  // namespace qvl

extern "C" void* qvl_cuda_create_backend(int device, size_t capacity, const char* profile, char* error, size_t error_capacity) {
  try {
    return static_cast<qvl::Backend*>(new qvl::CudaBackend(device, capacity, profile ? profile : "auto"));
  } catch (const std::exception& e) {
    if (error && error_capacity) {
      std::strncpy(error, e.what(), error_capacity - 1);
      error[error_capacity - 1] = '\0';
    }
    return nullptr;
  }
}
