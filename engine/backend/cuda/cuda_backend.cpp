// The CUDA backend: the Backend interface on one GPU. Lives in the plugin (libqvl-cuda), so the core never links
// CUDA. Activations are f32; weights keep their stored type on the device (kernels/weights.cuh). Every allocation
// goes through the memory pool, tagged with its owner, so the GUI can draw who holds the memory. All work runs on
// one stream of its own, and every host <-> device copy is staged through pinned memory, so nothing waits for the
// GPU until a result is read back. Which kernel runs for which shape comes from the profile's table (profile.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

#include "add_layer_norm.cuh"
#include "add_rms_norm.cuh"
#include "attention.cuh"
#include "attention_unfused.cuh"
#include "backend/backend.h"
#include "backend/op_costs.h"
#include "bandwidth.cuh"
#include "barrier.cuh"
#include "bias_gelu.cuh"
#include "common.cuh"
#include "convert.cuh"
#include "core/error.h"
#include "core/half.h"
#include "elementwise.cuh"
#include "fault.cuh"
#include "flash_attention.cuh"
#include "flash_attention_mma.cuh"
#include "gemm_cublas.cuh"
#include "gemm_tiled.cuh"
#include "gemv.cuh"
#include "gemv_qkv.cuh"
#include "gemv_swiglu.cuh"
#include "memory_pool.h"
#include "norm.cuh"
#include "patchify.cuh"
#include "pinned_staging.h"
#include "plugin_abi.h"
#include "profile.h"
#include "qk_norm_rope_append.cuh"
#include "rope.cuh"
#include "rows.cuh"

namespace qvl {
namespace {

cuda::WeightType weight_type(DType t) {
  switch (t) {
    case DType::F32: return cuda::WeightType::F32;
    case DType::F16: return cuda::WeightType::F16;
    case DType::BF16: return cuda::WeightType::BF16;
    default: fail("CUDA backend: weights of type ", dtype_name(t), " are not supported");
  }
}
int64_t last_dim(const Tensor& t) { return t.rank() ? t.dim(t.rank() - 1) : 1; }
int64_t rows_of(const Tensor& t) { return t.numel() / std::max<int64_t>(1, last_dim(t)); }
float* f32(const Tensor& t) {
  if (t.dtype() != DType::F32 || t.device() != Device::CUDA) fail("CUDA backend: expected an f32 device tensor");
  return const_cast<float*>(t.data<float>());
}
// An activation a norm writes: f32, or a 16-bit operand for cuBLAS (alloc_matmul_input).
struct ActivationOut {
  void* data;
  cuda::WeightType type;
};
ActivationOut activation_out(const Tensor& t) {
  if (t.device() != Device::CUDA || (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && t.dtype() != DType::F16))
    fail("CUDA backend: expected an f32, bf16 or f16 device tensor");
  return {const_cast<void*>(t.raw()), weight_type(t.dtype())};
}

class CudaBackend;

// Times one op on the GPU with a pair of events recorded in the stream around it; the events are read later
// (collect_timings), so timing never waits for the GPU.
class GpuTimer {
public:
  template <typename Describe> GpuTimer(CudaBackend& backend, Describe describe);
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;

private:
  CudaBackend* backend_ = nullptr;
  KernelEvent event_;
  cudaEvent_t start_ = nullptr;
};

class CudaBackend final : public Backend {
public:
  CudaBackend(int device, std::size_t capacity, const std::string& profile) : device_(device) {
    // For the tests of the fallback path: an initialisation failure on demand.
    if (const char* forced = std::getenv("QVL_CUDA_FAIL_INIT"); forced && *forced)
      fail("CUDA initialisation failed (forced by QVL_CUDA_FAIL_INIT=", forced, ")");
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp props{};
    CUDA_CHECK(cudaGetDeviceProperties(&props, device));
    // "auto" picks the SM61 profile below compute capability 7.0 (no tensor cores, no bf16).
    profile_ = profile == "sm61" || (profile == "auto" && props.major < 7) ? &cuda::kSm61Profile : &cuda::kNativeProfile;
    multiprocessors_ = props.multiProcessorCount;  // queried once: kernels pick their shape from it
    tensor_core_attention_ = profile_->tensor_core_attention && cuda::flash_attention_mma_available();
    overlapped_launches_ = profile_->overlapped_launches && props.major >= 9;
    name_ = std::string("cuda (") + props.name + ", sm_" + std::to_string(props.major * 10 + props.minor) +
            ", profile " + profile_->name + ")";
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    staging_ = std::make_unique<PinnedStaging>(std::size_t(32) << 20);
    if (profile_->gemm == cuda::GemmKernel::Cublas) cublas_ = std::make_unique<cuda::CublasGemm>(stream_);
    // Fault injection for the tests of the "kernel fault during generation" path: the N-th matrix product traps on the GPU.
    if (const char* n = std::getenv("QVL_CUDA_FAULT_AT_LINEAR")) fault_at_op_ = std::atoll(n);
    pool_ = std::make_shared<pool::MemoryPool>(
        pool::Upstream{[](std::size_t n) -> void* {
                         void* p = nullptr;
                         return cudaMalloc(&p, n) == cudaSuccess ? p : (cudaGetLastError(), nullptr);
                       },
                       [](void* p, std::size_t) { cudaFree(p); }},
        capacity);
    // The split decode attention's per-pair counters: zeroed once here, left zero by every call (attention.cu).
    attention_arrivals_ = device_tensor(DType::I32, {profile_->split_below_pairs_per_sm * multiprocessors_},
                                        pool::Owner::Workspace);
    CUDA_CHECK(cudaMemsetAsync(attention_arrivals_.raw(), 0, attention_arrivals_.nbytes(), stream_));
  }

  ~CudaBackend() override {
    try {
      collect_timings(true);
    } catch (const std::exception&) {  // a faulted device fails every call; the destructor must not throw
    }
    for (const Pending& p : pending_) cudaEventDestroy(p.start), cudaEventDestroy(p.end);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (reference_) cudaEventDestroy(reference_);
    cublas_.reset();
    staging_.reset();
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  DType activation_type() const override { return DType::F32; }

  void set_timing_sink(KernelTimingSink* sink) override {
    collect_timings(true);
    timing_ = sink;
    if (!sink) return;
    if (!reference_) CUDA_CHECK(cudaEventCreate(&reference_));
    CUDA_CHECK(cudaEventRecord(reference_, stream_));  // GPU time zero = the sink's clock now
    reference_ms_ = sink->now_ms();
  }

  void collect_timings(bool wait) override {
    std::size_t done = 0;
    for (; done < pending_.size(); ++done) {
      Pending& p = pending_[done];
      if (wait) CUDA_CHECK(cudaEventSynchronize(p.end));
      else if (cudaEventQuery(p.end) == cudaErrorNotReady) break;
      float offset = 0, duration = 0;
      CUDA_CHECK(cudaEventElapsedTime(&offset, reference_, p.start));
      CUDA_CHECK(cudaEventElapsedTime(&duration, p.start, p.end));
      p.event.start_ms = reference_ms_ + offset;
      p.event.duration_ms = duration;
      if (timing_) timing_->record(std::move(p.event));
      free_events_.push_back(p.start);
      free_events_.push_back(p.end);
    }
    pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(done));
  }

  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  std::string device_error() override {
    // Sticky errors (a kernel fault) poison the context: every later call returns them, so this is a reliable test.
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) return {};
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }

  double measure_read_bandwidth() override {
    // 2 GiB, far beyond the 50-60 MB L2 of current GPUs; less when a capped pool leaves less room.
    std::size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return cuda::measure_read_bandwidth(std::min<std::size_t>(std::size_t(2) << 30, free / 4 / 16 * 16), 5, multiprocessors_);
  }

  MemoryReport memory_report(bool with_segment_map) const override {
    const pool::Stats st = pool_->stats();
    MemoryReport r;
    r.available = true;
    r.capacity = pool_->capacity() == SIZE_MAX ? -1 : int64_t(pool_->capacity());
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
    for (const auto& [owner, bytes] : pool_->bytes_by_owner()) r.by_owner.emplace_back(pool::owner_name(owner), bytes);
    if (with_segment_map)
      for (const auto& seg : pool_->snapshot()) {
        MemoryReport::Segment out{int64_t(seg.size), {}};
        for (const auto& b : seg.blocks)
          out.blocks.push_back({int64_t(b.offset), int64_t(b.size), b.allocated, b.allocated ? pool::owner_name(b.owner) : ""});
        r.segment_map.push_back(std::move(out));
      }
    return r;
  }

  Tensor upload(const Tensor& host) override {
    if (host.device() == Device::CUDA) return host;
    // bf16 -> f16 is exact for every value in f16's normal range; an overflow would turn a weight into inf.
    const Tensor stored = profile_->weights_as_f16 && host.dtype() == DType::BF16 ? checked_f16(host) : host;
    Tensor t = device_tensor(stored.dtype(), stored.shape(), pool::Owner::Weights);
    stage(t.raw(), stored.raw(), stored.nbytes());
    return t;
  }
  Tensor alloc(Shape shape) override { return device_tensor(DType::F32, std::move(shape), pool::Owner::Activations); }
  // cuBLAS reads 16-bit weights with activations narrowed to their type: a norm can write that operand directly.
  Tensor alloc_matmul_input(Shape shape, DType weights) override {
    const bool narrow = (weights == DType::BF16 || weights == DType::F16) && runs_cublas(shape.empty() ? 1 : shape.front());
    return device_tensor(narrow ? weights : DType::F32, std::move(shape), pool::Owner::Activations);
  }
  Tensor from_host(const Tensor& host) override {
    const Tensor src = host.dtype() == DType::F32 ? host : host.to(DType::F32);
    Tensor t = alloc(src.shape());
    stage(t.raw(), src.raw(), src.nbytes());
    return t;
  }
  Tensor to_host(const Tensor& t) override {
    if (t.device() == Device::CPU) return t;
    Tensor h = Tensor::empty(t.dtype(), t.shape());
    if (recording_) fail("CUDA backend: a result cannot be read back while recording");
    staging_->download(h.raw(), t.raw(), t.nbytes(), stream_);
    return h;
  }

  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    const int64_t k = last_dim(x), m = rows_of(x), n = w.dim(0);
    if (w.rank() != 2 || w.dim(1) != k || y.numel() != m * n)
      fail("linear: shapes x ", shape_to_string(x.shape()), " w ", shape_to_string(w.shape()), " y ", shape_to_string(y.shape()));
    const GpuTimer timer(*this, [&] { return op_cost::linear(x, w, y); });
    maybe_inject_fault();
    const cuda::WeightType wt = weight_type(w.dtype()), bt = bias ? weight_type(bias->dtype()) : cuda::WeightType::F32;
    const void* b = bias ? bias->raw() : nullptr;
    const bool operand = x.dtype() != DType::F32;  // written by a norm as cuBLAS's operand (alloc_matmul_input)
    if (operand && (x.dtype() != w.dtype() || !runs_cublas(m)))
      fail("linear: ", dtype_name(x.dtype()), " activations are for cuBLAS products with ", dtype_name(x.dtype()),
           " weights; here ", dtype_name(w.dtype()), " weights, ", m, " rows");
    if (!operand && m <= profile_->gemv_max_rows &&
        cuda::gemv(f32(x), w.raw(), wt, b, bt, f32(y), m, n, k, false, overlapped_launches_, stream_))
      return;
    if (!runs_cublas(m)) {  // the tiled kernel: no conversion pass, the bias in its epilogue
      cuda::gemm_tiled(f32(x), w.raw(), wt, b, bt, f32(y), m, n, k, stream_);
      return;
    }
    // 16-bit weights read the activations in their type: converted here, or already so.
    Tensor narrow = operand || wt == cuda::WeightType::F32 ? Tensor()
                                                           : device_tensor(w.dtype(), {m, k}, pool::Owner::Workspace);
    cublas_->run(operand ? nullptr : f32(x), operand ? const_cast<void*>(x.raw()) : narrow.raw(), w.raw(), wt, f32(y),
                 m, n, k);
    if (b) cuda::add_bias(f32(y), b, bt, m, n, stream_);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override {
    const GpuTimer timer(*this, [&] { return op_cost::row_norm("rms_norm", x); });
    const ActivationOut out = activation_out(y);
    cuda::rms_norm(f32(x), w.raw(), weight_type(w.dtype()), eps, out.data, out.type, rows_of(x), last_dim(x), stream_);
  }
  void add_rms_norm(Tensor& x, const Tensor& residual, const Tensor& w, float eps, Tensor& y) override {
    if (residual.numel() != x.numel() || w.numel() != last_dim(x)) fail("add_rms_norm: shapes differ");
    const GpuTimer timer(*this, [&] { return op_cost::add_row_norm("add+rms_norm", x); });
    const ActivationOut out = activation_out(y);
    cuda::add_rms_norm(f32(x), f32(residual), w.raw(), weight_type(w.dtype()), eps, out.data, out.type, rows_of(x),
                       last_dim(x), stream_);
  }
  void add_layer_norm(Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b, float eps,
                      Tensor& y) override {
    if (residual.numel() != x.numel() || w.numel() != last_dim(x) || b.numel() != last_dim(x))
      fail("add_layer_norm: shapes differ");
    const GpuTimer timer(*this, [&] { return op_cost::add_row_norm("add+layer_norm", x); });
    const ActivationOut out = activation_out(y);
    cuda::add_layer_norm(f32(x), f32(residual), nullptr, cuda::WeightType::F32, w.raw(), weight_type(w.dtype()), b.raw(),
                         weight_type(b.dtype()), eps, out.data, out.type, rows_of(x), last_dim(x), stream_);
  }
  // With cuBLAS (many rows, native profile) the bias is a kernel of its own after the GEMM: here it rides along
  // with the GELU or the residual add + LayerNorm instead. The GEMV and the tiled GEMM add it in their epilogue
  // already, so those take the plain sequence.
  void linear_gelu(const Tensor& x, const Tensor& w, const Tensor* bias, GeluKind kind, Tensor& y) override {
    if (!bias || !runs_cublas(rows_of(x))) return Backend::linear_gelu(x, w, bias, kind, y);
    if (bias->numel() != w.dim(0)) fail("linear_gelu: the bias has ", bias->numel(), " values for ", w.dim(0), " rows");
    linear(x, w, nullptr, y);
    const GpuTimer timer(*this, [&] { return op_cost::elementwise("bias+gelu", y, 2); });
    cuda::bias_gelu(f32(y), bias->raw(), weight_type(bias->dtype()), rows_of(y), last_dim(y), kind == GeluKind::Tanh,
                    stream_);
  }
  void linear_add_layer_norm(const Tensor& in, const Tensor& w, const Tensor* bias, Tensor& scratch, Tensor& x,
                             const Tensor& norm_w, const Tensor& norm_b, float eps, Tensor& y) override {
    if (!bias || !runs_cublas(rows_of(in)))
      return Backend::linear_add_layer_norm(in, w, bias, scratch, x, norm_w, norm_b, eps, y);
    if (scratch.numel() != x.numel() || bias->numel() != last_dim(x) || norm_w.numel() != last_dim(x) ||
        norm_b.numel() != last_dim(x))
      fail("linear_add_layer_norm: shapes differ");
    linear(in, w, nullptr, scratch);
    const GpuTimer timer(*this, [&] { return op_cost::add_row_norm("add+layer_norm", x); });
    const ActivationOut out = activation_out(y);
    cuda::add_layer_norm(f32(x), f32(scratch), bias->raw(), weight_type(bias->dtype()), norm_w.raw(),
                         weight_type(norm_w.dtype()), norm_b.raw(), weight_type(norm_b.dtype()), eps, out.data, out.type,
                         rows_of(x), last_dim(x), stream_);
  }
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) override {
    const GpuTimer timer(*this, [&] { return op_cost::row_norm("layer_norm", x); });
    const ActivationOut out = activation_out(y);
    cuda::layer_norm(f32(x), w.raw(), weight_type(w.dtype()), b.raw(), weight_type(b.dtype()), eps, out.data, out.type,
                     rows_of(x), last_dim(x), stream_);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override { elementwise(cuda::Elementwise::Add, a, &b, y); }
  void silu_mul(const Tensor& g, const Tensor& u, Tensor& y) override { elementwise(cuda::Elementwise::SiluMul, g, &u, y); }
  void gelu(const Tensor& x, GeluKind kind, Tensor& y) override {
    elementwise(kind == GeluKind::Tanh ? cuda::Elementwise::GeluTanh : cuda::Elementwise::GeluErf, x, nullptr, y);
  }
  Tensor alloc_indices(int64_t count) override { return device_tensor(DType::I64, {count}, pool::Owner::Activations); }
  void write_indices(Tensor& dst, std::span<const int64_t> values) override {
    if (dst.dtype() != DType::I64 || dst.numel() != int64_t(values.size())) fail("write_indices: sizes differ");
    stage(dst.raw(), values.data(), values.size_bytes());
  }
  void write(Tensor& dst, const Tensor& host) override {
    if (dst.numel() != host.numel()) fail("write: sizes differ");
    const Tensor src = host.dtype() == DType::F32 ? host : host.to(DType::F32);
    stage(f32(dst), src.raw(), src.nbytes());
  }
  void embed(const Tensor& table, std::span<const int32_t> ids, Tensor& y) override {
    const std::vector<int64_t> wide(ids.begin(), ids.end());
    for (int64_t id : wide)
      if (id < 0 || id >= table.dim(0)) fail("embed: token id ", id, " is outside the embedding table");
    embed_at(table, indices(wide), y);
  }
  void patchify(const Tensor& image, const PatchLayout& p, Tensor& out) override {
    check_patchify(image, p, out);
    const int64_t h = image.dim(0), w = image.dim(1), ps = p.patch, m = p.merge, tp = p.temporal;
    Tensor pixels = device_tensor(DType::U8, image.shape(), pool::Owner::Workspace);
    stage(pixels.raw(), image.raw(), image.nbytes());
    const GpuTimer timer(*this, [&] { return op_cost::make("patchify", double(image.nbytes() + out.nbytes()), 0); });
    cuda::PatchParams params{h, w, ps, tp, m, {p.mean[0], p.mean[1], p.mean[2]}, {p.std[0], p.std[1], p.std[2]}};
    cuda::patchify(pixels.data<uint8_t>(), params, f32(out), stream_);
  }
  // The ids are not checked here (they are on the device); embed checks them, and recorded decode steps get them
  // from the sampler, which picks inside the vocabulary.
  void embed_at(const Tensor& table, const Tensor& ids, Tensor& y) override {
    const GpuTimer timer(*this, [&] { return op_cost::embed(table, std::size_t(ids.numel())); });
    cuda::gather_rows(table.raw(), weight_type(table.dtype()), ids.data<int64_t>(), f32(y), ids.numel(), table.dim(1),
                      stream_);
  }
  void rope(Tensor& x, const Tensor& cos, const Tensor& sin) override {
    const GpuTimer timer(*this, [&] { return op_cost::rope(x, cos); });
    cuda::rope(f32(x), f32(cos), f32(sin), x.dim(0), x.dim(1), x.dim(2), stream_);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask, float scale,
                 Tensor& out) override {
    const bool causal = mask.kind == AttentionMask::Kind::Causal;
    const int64_t s = q.dim(0), hq = q.dim(1), hkv = k.dim(1), d = q.dim(2), segments = int64_t(mask.bounds.size()) - 1;
    const int64_t* past_on_device = mask.past_on_device ? mask.past_on_device->data<int64_t>() : nullptr;
    const bool tiled = !past_on_device && s >= profile_->flash_min_queries;
    const bool tensor_cores = tiled && tensor_core_attention_ && cuda::flash_attention_mma_fits(d);
    const bool sparse = !mask.block_layout.empty();
    static_assert(cuda::kFlashLayoutBlock == AttentionMask::kSparseBlock);
    mask.check_block_layout(s);
    if (sparse && !(tiled && (tensor_cores || cuda::flash_attention_fits(d))))
      fail("attention: a block-sparse layout runs in the tiled kernels only: at least ", profile_->flash_min_queries,
           " queries (prefill) and head_dim a multiple of 4 up to 128; here ", s, " and ", d);
    const GpuTimer timer(*this, [&] {
      KernelEvent event = op_cost::attention(q, k, kv_len, mask);
      if (tensor_cores) event.name += " tensor cores";
      return event;
    });
    const DeviceMask dev(*this, mask);
    const int64_t *dev_bounds = dev.bounds_ptr(), *dev_layout = dev.layout_ptr();
    if (tensor_cores) {
      cuda::flash_attention_mma(f32(q), f32(k), f32(v), f32(out), s, hq, hkv, d, kv_len, causal, mask.past, dev_bounds,
                                segments, scale, dev_layout, mask.layout_side, stream_);
      return;
    }
    if (tiled && cuda::flash_attention_fits(d)) {
      cuda::flash_attention(f32(q), f32(k), f32(v), f32(out), s, hq, hkv, d, kv_len, causal, mask.past, dev_bounds,
                            segments, scale, dev_layout, mask.layout_side, stream_);
      return;
    }
    const bool split_keys = past_on_device || s * hq < profile_->split_below_pairs_per_sm * multiprocessors_;
    const int64_t floats = split_keys ? cuda::attention_split_workspace(s, hq, d, kv_len, multiprocessors_) : 0;
    if (floats && s * hq > attention_arrivals_.numel())
      fail("attention: ", s * hq, " (query, head) pairs with the position on the device; the split kernel counts up to ",
           attention_arrivals_.numel());
    Tensor workspace = floats ? device_tensor(DType::F32, {floats}, pool::Owner::Workspace) : Tensor();
    cuda::attention(f32(q), f32(k), f32(v), f32(out), s, hq, hkv, d, kv_len, causal, mask.past, past_on_device,
                    dev_bounds, segments, scale, split_keys, floats ? workspace.data<float>() : nullptr,
                    reinterpret_cast<unsigned*>(attention_arrivals_.raw()), multiprocessors_,
                    overlapped_launches_, stream_);
  }
  // Three kernels through a score matrix in memory, in chunks of queries whose scores fit 64 MB. A recorded decode
  // step (its position on the device) keeps the decode kernel: the reference is for prefill, vision and eager decode.
  void attention_unfused(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask,
                         float scale, Tensor& out) override {
    if (mask.past_on_device) return attention(q, k, v, kv_len, mask, scale, out);
    const bool causal = mask.kind == AttentionMask::Kind::Causal;
    const int64_t s = q.dim(0), hq = q.dim(1), hkv = k.dim(1), d = q.dim(2), segments = int64_t(mask.bounds.size()) - 1;
    if (hq % hkv != 0 || k.dim(2) != d || kv_len > k.dim(0)) fail("attention: shapes do not fit");
    mask.check_block_layout(s);
    if (s == 0 || hq == 0 || kv_len == 0) return;
    const DeviceMask dev(*this, mask);
    const int64_t *dev_bounds = dev.bounds_ptr(), *dev_layout = dev.layout_ptr();
    const int64_t chunk = std::clamp<int64_t>((int64_t(64) << 20) / 4 / std::max<int64_t>(1, hq * kv_len), 1, s);
    Tensor scores = device_tensor(DType::F32, {std::max<int64_t>(1, chunk * hq * kv_len)}, pool::Owner::Workspace);
    for (int64_t first = 0; first < s; first += chunk) {
      const int64_t rows = std::min(chunk, s - first);
      const double matrix = double(rows * hq * kv_len) * 4, keys = double(kv_len * hkv * d) * 4;
      {
        const GpuTimer timer(*this, [&] {
          return op_cost::make("attention scores d=" + std::to_string(d), matrix + keys, 2.0 * matrix / 4 * double(d));
        });
        cuda::attention_scores(f32(q), f32(k), scores.data<float>(), first, rows, hq, hkv, d, kv_len, causal,
                               mask.past, dev_bounds, segments, dev_layout, mask.layout_side, scale, stream_);
      }
      {
        const GpuTimer timer(*this, [&] { return op_cost::make("attention softmax", 3 * matrix, 3 * matrix / 4); });
        cuda::attention_softmax(scores.data<float>(), rows, hq, kv_len, stream_);
      }
      const GpuTimer timer(*this, [&] {
        return op_cost::make("attention weighted sum d=" + std::to_string(d), matrix + keys, 2.0 * matrix / 4 * double(d));
      });
      cuda::attention_weighted_sum(scores.data<float>(), f32(v), f32(out), first, rows, hq, hkv, d, kv_len, stream_);
    }
  }
  void copy_rows(const Tensor& src, Tensor& dst, int64_t row) override {
    const std::size_t row_bytes = dst.nbytes() / std::size_t(dst.dim(0));
    if (row + src.dim(0) > dst.dim(0) || src.nbytes() != std::size_t(src.dim(0)) * row_bytes) fail("copy_rows: does not fit");
    const GpuTimer timer(*this, [&] { return op_cost::rows("copy_rows", src, 2); });
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst.raw()) + std::size_t(row) * row_bytes, src.raw(), src.nbytes(),
                               cudaMemcpyDeviceToDevice, stream_));
  }
  // The position is on the device: the caller keeps it below dst rows - src rows (the KV cache's capacity).
  void copy_rows_at(const Tensor& src, Tensor& dst, const Tensor& row) override {
    // Rows along the first dimension, as copy_rows: a cache row is [kv heads, head_dim].
    const int64_t rows = src.dim(0), width = src.numel() / std::max<int64_t>(1, rows);
    if (dst.numel() / std::max<int64_t>(1, dst.dim(0)) != width) fail("copy_rows_at: row sizes differ");
    const GpuTimer timer(*this, [&] { return op_cost::rows("copy_rows", src, 2); });
    cuda::copy_rows_at(f32(src), f32(dst), row.data<int64_t>(), rows, width, stream_);
  }
  void qkv_projection(const Tensor& x, const Tensor& wq, const Tensor* bq, const Tensor& wk, const Tensor* bk,
                      const Tensor& wv, const Tensor* bv, Tensor& q, Tensor& k, Tensor& v) override {
    if (!gemv_qkv(x, nullptr, 0, wq, bq, wk, bk, wv, bv, q, k, v))
      Backend::qkv_projection(x, wq, bq, wk, bk, wv, bv, q, k, v);  // many rows (prefill): three GEMMs
  }
  void rms_norm_qkv_projection(const Tensor& x, const Tensor& norm_w, float eps, Tensor& normed, const Tensor& wq,
                               const Tensor* bq, const Tensor& wk, const Tensor* bk, const Tensor& wv, const Tensor* bv,
                               Tensor& q, Tensor& k, Tensor& v) override {
    if (!gemv_qkv(x, &norm_w, eps, wq, bq, wk, bk, wv, bv, q, k, v))
      Backend::rms_norm_qkv_projection(x, norm_w, eps, normed, wq, bq, wk, bk, wv, bv, q, k, v);
  }
  void swiglu_projection(const Tensor& x, const Tensor& gate, const Tensor& up, Tensor& y, Tensor& scratch) override {
    // Many rows (prefill): GEMMs are compute-bound anyway.
    if (!gemv_swiglu(x, nullptr, 0, gate, up, y)) Backend::swiglu_projection(x, gate, up, y, scratch);
  }
  void rms_norm_swiglu_projection(const Tensor& x, const Tensor& norm_w, float eps, Tensor& normed, const Tensor& gate,
                                  const Tensor& up, Tensor& y, Tensor& scratch) override {
    if (!gemv_swiglu(x, &norm_w, eps, gate, up, y))
      Backend::rms_norm_swiglu_projection(x, norm_w, eps, normed, gate, up, y, scratch);
  }
  bool folds_norms_into_projections(int64_t rows) const override { return rows <= profile_->gemv_max_rows; }
  void linear_add(const Tensor& in, const Tensor& w, const Tensor* bias, Tensor& scratch, Tensor& x) override {
    const int64_t k = last_dim(in), m = rows_of(in), n = w.dim(0);
    const bool fits = m <= profile_->gemv_max_rows && w.rank() == 2 && w.dim(1) == k && x.numel() == m * n &&
                      (!bias || bias->numel() == n) && cuda::gemv_fits(f32(in), w.raw(), weight_type(w.dtype()), m, k);
    if (!fits) return Backend::linear_add(in, w, bias, scratch, x);  // many rows: a GEMM, then the add
    const GpuTimer timer(*this, [&] { return op_cost::linear(in, w, x, "linear+add"); });
    maybe_inject_fault();
    const cuda::WeightType bt = bias ? weight_type(bias->dtype()) : cuda::WeightType::F32;
    cuda::gemv(f32(in), w.raw(), weight_type(w.dtype()), bias ? bias->raw() : nullptr, bt, f32(x), m, n, k, true,
               overlapped_launches_, stream_);
  }
  void qk_norm_rope_append(Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm, float eps,
                           const Tensor& cos, const Tensor& sin, Tensor& cache_k, Tensor& cache_v, int64_t row,
                           const Tensor* row_on_device) override {
    const int64_t s = q.dim(0), hq = q.dim(1), hkv = k.dim(1), d = q.dim(2);
    if (k.dim(0) != s || k.dim(2) != d || v.numel() != k.numel() || d % 2 || d > 512 || cache_k.dim(1) != hkv ||
        cache_k.dim(2) != d || q_norm.numel() != d || k_norm.numel() != d || cos.numel() != s * d ||
        (!row_on_device && row + s > cache_k.dim(0)))
      fail("qk_norm_rope_append: shapes q ", shape_to_string(q.shape()), " k ", shape_to_string(k.shape()), " cache ",
           shape_to_string(cache_k.shape()));
    const GpuTimer timer(*this, [&] { return op_cost::qk_norm_rope_append(q, k, cos); });
    cuda::qk_norm_rope_append(f32(q), f32(k), f32(v), q_norm.raw(), weight_type(q_norm.dtype()), k_norm.raw(),
                              weight_type(k_norm.dtype()), eps, f32(cos), f32(sin), f32(cache_k), f32(cache_v), row,
                              row_on_device ? row_on_device->data<int64_t>() : nullptr, s, hq, hkv, d,
                              overlapped_launches_, stream_);
  }
  void add_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) override { scatter(x, src, rows, true); }
  void set_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) override { scatter(x, src, rows, false); }

  // Recording is stream capture into a CUDA graph; every tensor allocated meanwhile stays with the graph (its
  // kernels keep using those addresses on every replay).
  bool begin_recording() override {
    if (timing_ || recording_) return false;  // per-kernel timing needs events around each op: run directly
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    recording_ = true;
    recorded_tensors_.clear();
    return true;
  }
  std::shared_ptr<RecordedWork> end_recording() override {
    if (!recording_) return nullptr;
    recording_ = false;
    cuda::barrier(stream_);  // the graph is done when its last kernel is, not when that kernel lets others start
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    auto work = std::make_shared<Graph>();
    work->tensors = std::move(recorded_tensors_);
    // WithFlags: the one spelling CUDA 11 (the Pascal build) and CUDA 12+ share.
    const cudaError_t e = cudaGraphInstantiateWithFlags(&work->exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(e);
    return work;
  }
  void replay(const RecordedWork& work) override {
    const auto* graph = dynamic_cast<const Graph*>(&work);
    if (!graph) fail("CUDA backend: replay of work recorded by another backend");
    CUDA_CHECK(cudaGraphLaunch(graph->exec, stream_));
  }

private:
  friend class GpuTimer;
  struct Graph final : RecordedWork {
    cudaGraphExec_t exec = nullptr;
    std::vector<Tensor> tensors;
    ~Graph() override {
      if (exec) cudaGraphExecDestroy(exec);
    }
  };
  void stage(void* dst, const void* src, std::size_t bytes) {
    // A recorded copy would read the staging ring at replay time, long after the ring moved on.
    if (recording_) fail("CUDA backend: host data cannot be uploaded while recording (write it before replaying)");
    staging_->upload(dst, src, bytes, stream_);
  }
  static Tensor checked_f16(const Tensor& bf16) {
    Tensor f16 = bf16.to(DType::F16);
    const auto* h = f16.data<uint16_t>();
    for (int64_t i = 0; i < f16.numel(); ++i)
      if ((h[i] & 0x7c00) == 0x7c00 && !std::isnan(bf16_to_f32(bf16.data<uint16_t>()[i])))
        fail("SM61 profile: a bf16 weight of ", bf16_to_f32(bf16.data<uint16_t>()[i]), " does not fit f16 storage");
    return f16;
  }
  struct Pending {
    KernelEvent event;
    cudaEvent_t start, end;
  };
  cudaEvent_t take_event() {
    if (free_events_.empty()) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }

  Tensor device_tensor(DType dtype, Shape shape, pool::Owner owner) {
    const std::size_t bytes = std::size_t(shape_numel(shape)) * dtype_size(dtype);
    void* p = pool_->allocate(std::max<std::size_t>(bytes, 1), owner);
    std::shared_ptr<const void> keep(p, [pool = pool_](const void* q) { pool->release(const_cast<void*>(q)); });
    Tensor t = Tensor::borrow(dtype, std::move(shape), p, std::move(keep), Device::CUDA);
    if (recording_) recorded_tensors_.push_back(t);
    return t;
  }
  Tensor indices(std::span<const int64_t> values) {
    Tensor t = alloc_indices(int64_t(values.size()));
    write_indices(t, values);
    return t;
  }
  // A host list on the device, uploaded once while it stays the same: every layer of a forward pass passes the same
  // mask. A recording uploads its own copy (it keeps what it allocates; the cached copy may be replaced).
  struct UploadedList {
    std::vector<int64_t> host;
    Tensor device;
  };
  Tensor uploaded(const std::vector<int64_t>& values, UploadedList& slot) {
    const auto upload = [&] {
      Tensor t = device_tensor(DType::I64, {int64_t(values.size())}, pool::Owner::Workspace);
      write_indices(t, values);
      return t;
    };
    if (recording_) return upload();
    if (!slot.device.raw() || slot.host != values) slot = {values, upload()};
    return slot.device;
  }
  // An attention mask's host-side lists (segment bounds, block layout) on the device, for the kernels.
  struct DeviceMask {
    Tensor bounds, layout;  // empty where the mask has none
    DeviceMask(CudaBackend& be, const AttentionMask& mask)
        : bounds(mask.kind == AttentionMask::Kind::Segments ? be.uploaded(mask.bounds, be.mask_bounds_) : Tensor()),
          layout(mask.block_layout.empty() ? Tensor() : be.uploaded(mask.block_layout, be.mask_layout_)) {}
    const int64_t* bounds_ptr() const { return bounds.raw() ? bounds.data<int64_t>() : nullptr; }
    const int64_t* layout_ptr() const { return layout.raw() ? layout.data<int64_t>() : nullptr; }
  };
  // The decode GEMVs of the fused projections, with the input RMSNorm folded in when `norm` is given. false: nothing
  // ran (many rows, or a shape the kernel does not take), and the caller runs the unfused sequence.
  bool gemv_qkv(const Tensor& x, const Tensor* norm, float eps, const Tensor& wq, const Tensor* bq, const Tensor& wk,
                const Tensor* bk, const Tensor& wv, const Tensor* bv, Tensor& q, Tensor& k, Tensor& v) {
    const int64_t kx = last_dim(x), m = rows_of(x);
    const Tensor* weights[3] = {&wq, &wk, &wv};
    const Tensor* biases[3] = {bq, bk, bv};
    Tensor* outputs[3] = {&q, &k, &v};
    const Tensor* some_bias = bq ? bq : bk ? bk : bv;
    cuda::QkvProjection p{};
    bool fits = m <= profile_->gemv_max_rows && (!norm || norm->numel() == kx);
    for (int i = 0; i < 3 && fits; ++i) {
      const Tensor& w = *weights[i];
      fits = w.rank() == 2 && w.dim(1) == kx && w.dtype() == wq.dtype() && outputs[i]->numel() == m * w.dim(0) &&
             (!biases[i] || (biases[i]->dtype() == some_bias->dtype() && biases[i]->numel() == w.dim(0)));
      p.w[i] = w.raw();
      p.bias[i] = biases[i] ? biases[i]->raw() : nullptr;
      p.y[i] = f32(*outputs[i]);
      p.n[i] = w.dim(0);
    }
    if (!fits || !cuda::gemv_qkv_fits(f32(x), p, weight_type(wq.dtype()), m, kx, norm != nullptr)) return false;
    const GpuTimer timer(*this, [&] {
      const int64_t rows = p.n[0] + p.n[1] + p.n[2];
      return op_cost::make(std::string(norm ? "rms_norm+" : "") + "linear q+k+v " + std::to_string(rows) + "x" +
                               std::to_string(kx) + " " + std::string(dtype_name(wq.dtype())) + " m<=4",
                           double(wq.nbytes() + wk.nbytes() + wv.nbytes() + x.nbytes() + q.nbytes() + k.nbytes() +
                                  v.nbytes()),
                           2.0 * double(m) * double(rows) * double(kx));
    });
    maybe_inject_fault();
    cuda::gemv_qkv(f32(x), p, weight_type(wq.dtype()), some_bias ? weight_type(some_bias->dtype()) : cuda::WeightType::F32,
                   m, kx, gemv_norm(norm, eps), overlapped_launches_, stream_);
    return true;
  }
  bool gemv_swiglu(const Tensor& x, const Tensor* norm, float eps, const Tensor& gate, const Tensor& up, Tensor& y) {
    const int64_t k = last_dim(x), m = rows_of(x), n = gate.dim(0);
    const bool fits = gate.dtype() == up.dtype() && gate.shape() == up.shape() && gate.rank() == 2 && gate.dim(1) == k &&
                      y.numel() == m * n && m <= profile_->gemv_max_rows && (!norm || norm->numel() == k) &&
                      cuda::gemv_swiglu_fits(f32(x), gate.raw(), up.raw(), weight_type(gate.dtype()), m, k, norm != nullptr);
    if (!fits) return false;
    const GpuTimer timer(*this, [&] { return op_cost::linear(x, gate, y, norm ? "rms_norm+linear+swiglu" : "linear+swiglu", 2); });
    maybe_inject_fault();
    cuda::gemv_swiglu(f32(x), gate.raw(), up.raw(), weight_type(gate.dtype()), f32(y), m, n, k, gemv_norm(norm, eps),
                      overlapped_launches_, stream_);
    return true;
  }
  cuda::GemvNorm gemv_norm(const Tensor* norm, float eps) const {
    return norm ? cuda::GemvNorm{norm->raw(), weight_type(norm->dtype()), eps} : cuda::GemvNorm{};
  }
  // Whether linear() runs cuBLAS for m rows, and so adds the bias with a kernel of its own after the product (the
  // GEMV and the tiled GEMM add it in their epilogue).
  bool runs_cublas(int64_t m) const {
    return profile_->gemm == cuda::GemmKernel::Cublas && m > profile_->gemv_max_rows;
  }
  void maybe_inject_fault() {
    if (fault_at_op_ > 0 && --fault_at_op_ == 0) cuda::trap(stream_);
  }
  void elementwise(cuda::Elementwise op, const Tensor& a, const Tensor* b, Tensor& y) {
    if (y.numel() != a.numel() || (b && b->numel() != a.numel())) fail("elementwise: sizes differ");
    static const char* const names[] = {"add", "silu_mul", "gelu_tanh", "gelu_erf"};
    const GpuTimer timer(*this, [&] { return op_cost::elementwise(names[int(op)], a, b ? 3 : 2); });
    cuda::elementwise(op, f32(a), b ? f32(*b) : nullptr, f32(y), a.numel(), stream_);
  }
  void scatter(Tensor& x, const Tensor& src, std::span<const int64_t> rows, bool accumulate) {
    if (last_dim(src) != last_dim(x) || rows_of(src) != int64_t(rows.size())) fail("scatter: shapes do not fit");
    for (int64_t r : rows)
      if (r < 0 || r >= rows_of(x)) fail("scatter: row ", r, " out of range");
    const Tensor dev_rows = indices(rows);
    const GpuTimer timer(*this, [&] { return op_cost::rows(accumulate ? "add_rows" : "set_rows", src, accumulate ? 3 : 2); });
    cuda::scatter_rows(f32(x), f32(src), dev_rows.data<int64_t>(), int64_t(rows.size()), last_dim(x), accumulate, stream_);
  }

  int device_;
  int multiprocessors_ = 1;
  const cuda::KernelProfile* profile_ = nullptr;
  bool tensor_core_attention_ = false;  // the profile asks for it and this device and build run it
  bool overlapped_launches_ = false;    // the profile asks for them and this device has them (SM90+)
  Tensor attention_arrivals_;
  UploadedList mask_bounds_, mask_layout_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  int64_t fault_at_op_ = 0;
  bool recording_ = false;
  std::vector<Tensor> recorded_tensors_;
  std::shared_ptr<pool::MemoryPool> pool_;
  std::unique_ptr<PinnedStaging> staging_;
  std::unique_ptr<cuda::CublasGemm> cublas_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  cudaEvent_t reference_ = nullptr;
  double reference_ms_ = 0;
};

template <typename Describe> GpuTimer::GpuTimer(CudaBackend& backend, Describe describe) {
  if (!backend.timing_) return;
  backend_ = &backend;
  event_ = describe();
  start_ = backend.take_event();
  CUDA_CHECK(cudaEventRecord(start_, backend.stream_));
}

GpuTimer::~GpuTimer() {
  if (!backend_) return;
  cudaEvent_t end = backend_->take_event();
  if (cudaEventRecord(end, backend_->stream_) == cudaSuccess) backend_->pending_.push_back({std::move(event_), start_, end});
}

}  // namespace
}  // namespace qvl

extern "C" void* qvl_cuda_create_backend(int device, size_t capacity, const char* profile, char* error, size_t error_capacity) {
  try {
    return static_cast<qvl::Backend*>(new qvl::CudaBackend(device, capacity ? capacity : SIZE_MAX, profile ? profile : "auto"));
  } catch (const std::exception& e) {
    if (error && error_capacity) {
      std::strncpy(error, e.what(), error_capacity - 1);
      error[error_capacity - 1] = '\0';
    }
    return nullptr;
  }
}
