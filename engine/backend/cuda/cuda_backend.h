#pragma once
// The CUDA backend: the Backend interface on one GPU. Lives in the plugin (libqvl-cuda), so the core never links
// CUDA. Activations are f32 (but a projection's norm slot, which may hold cuBLAS's 16-bit operand); weights keep
// their stored type on the device (kernels/weights.cuh). Which kernel runs
// for which shape comes from the profile's table (profile.h), and fused or unfused from the backend's Fusions.
// The class is spread over files by concern:
//   cuda_backend.cpp      services and memory (upload, allocation, host copies, the pool report, identity)
//   cuda_recording.cpp    CUDA graph capture and replay
//   cuda_projections.cpp  linear and project(): GEMV, tiled GEMM, cuBLAS, the fused projections and epilogues
//   cuda_quantized.cpp    the same for q8/q4 weights: the quantised GEMV, dequantise-then-GEMM
//   cuda_attention.cpp    attention (flash, split decode, the unfused reference), its mask cache, q/k norm + RoPE
//   cuda_rows.cpp         norms, element-wise ops, embedding, RoPE, row copies, patchify, the greedy pick
//   cuda_head_pick.cpp    the output head's greedy pick from its bounds copy (project_then_pick)
//   cuda_interop.cpp      memory and semaphores shared with a renderer, the pool map kernel (CudaInterop)
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_context.h"
#include "cuda_timing.h"
#include "pending_reads.h"
#include "elementwise.cuh"
#include "gemv.cuh"
#include "gemv_quantized.cuh"
#include "head_bounds.cuh"
#include "qk_norm_rope_append.cuh"
#include "quantized_args.h"
#include "step_handoff.cuh"

namespace qvl {

class CudaBackend final : public Backend {
public:
  // capacity: bytes the pool may take; 0: the driver's free memory less kOutsidePoolReserve.
  CudaBackend(int device, std::size_t capacity, const std::string& profile);
  static constexpr std::size_t kOutsidePoolReserve = std::size_t(200) << 20;
  ~CudaBackend() override;

  // cuda_backend.cpp
  std::string name() const override { return ctx_.name; }
  DType activation_type() const override { return DType::F32; }
  BackendLimits limits() const override;
  std::optional<DeviceIdentity> device_identity() const override;
  DeviceInterop* interop() override;  // cuda_interop.cpp's CudaInterop, made on first use
  void set_timing_sink(KernelTimingSink* sink) override;
  void collect_timings(bool wait) override { timer_.collect(wait); }
  QueueMark mark() override;
  double elapsed_ms(const QueueMark& from, const QueueMark& to) override;
  std::string device_error() override;
  void inject_fault(const FaultInjection& fault) override;
  double measure_read_bandwidth() override;
  MemoryReport memory_report(bool with_segment_map) const override;
  Tensor upload(const Tensor& host, WeightRole role) override;
  std::vector<LinearWeights> upload_linears(const std::vector<LinearWeights>& host) override;
  Tensor alloc(Shape shape) override;
  Tensor alloc_cache(Shape shape) override;
  DType cache_type() const override { return cache_type_; }
  void set_cache_type(DType type) override;
  DType weight_storage(DType stored) const override;
  Tensor alloc_normed(Shape shape, const Projection& reader) override;
  Tensor alloc_operand(Shape shape, const Projection& p) override;
  Tensor alloc_for_product(Shape shape, const LinearWeights& reader) override;
  Tensor alloc_keys_values(Shape shape) override;
  void project_then_heads(const Projection& p, const HeadNormRopeAppend& op) override;
  Tensor from_host(const Tensor& host) override;
  Tensor to_host(const Tensor& t) override;
  std::unique_ptr<PendingRead> read_later(const Tensor& t) override;
  Tensor alloc_handed(DType dtype, Shape shape) override;
  Tensor alloc_indices(int64_t count) override;
  void write_indices(Tensor& dst, std::span<const int64_t> values) override;
  void write(Tensor& dst, const Tensor& host) override;

  // cuda_recording.cpp (a recorded step's hand-off closes its graph in the place of barrier.cuh's empty kernel)
  bool can_record() const override;
  bool begin_recording(RecordedUploads uploads = RecordedUploads::Refused) override;
  std::shared_ptr<RecordedWork> end_recording() override;
  void replay(const RecordedWork& work) override;
  void hand_off_step(const StepHandoff& op) override;

  // cuda_projections.cpp
  void linear(const Tensor& x, const LinearWeights& w, Tensor& y) override;
  void project(const Projection& p) override;

  // cuda_attention.cpp
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask,
                 float scale, Tensor& out) override;
  void qk_norm_rope_append(const HeadNormRopeAppend& op) override;
  void attention_tap(const AttentionTap& tap) override;

  // cuda_rows.cpp
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override;
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void silu_mul(const Tensor& g, const Tensor& u, Tensor& y) override;
  void gelu(const Tensor& x, GeluKind kind, Tensor& y) override;
  void patchify(const Tensor& image, const PatchLayout& layout, Tensor& out) override;
  void embed(const LinearWeights& table, std::span<const int32_t> ids, Tensor& y) override;
  void embed_at(const LinearWeights& table, const Tensor& ids, Tensor& y) override;
  void rope(Tensor& x, const Tensor& cos, const Tensor& sin) override;
  void copy_rows(const Tensor& src, Tensor& dst, int64_t row) override;
  void copy_rows_at(const Tensor& src, Tensor& dst, const Tensor& row) override;
  void add_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) override;
  void set_rows(Tensor& x, const Tensor& src, std::span<const int64_t> rows) override;
  void add_blended_rows(Tensor& x, const Tensor& table, const RowBlend& blend) override;
  void greedy_pick(const Tensor& logits, int64_t vocabulary, Tensor& pick) override;
  void project_then_pick(const Projection& head, int64_t vocabulary, Tensor& pick) override;  // cuda_head_pick.cpp
  void project_then_top_k(const Projection& head, const TopKSpec& spec, Tensor& out) override;
  bool prepare_head_pick(const LinearWeights& head) override;
  bool picks_from_bounds_of(const LinearWeights& head) const override;
  void top_k_candidates(const Tensor& logits, const TopKSpec& spec, Tensor& out) override;

private:
  template <typename Describe> GpuTimer timed(Describe describe) { return GpuTimer(timer_, describe); }
  Tensor indices(std::span<const int64_t> values);

  // cuda_projections.cpp: the pieces project() chooses between.
  void linear_into(const Tensor& x, const LinearWeights& w, const Tensor* bias, Tensor& y);
  void project_floats(const Projection& p);
  bool folds_norm(const RowNorm& norm, int64_t rows) const;

  // cuda_quantized.cpp
  void linear_quantised(const Tensor& x, const LinearWeights& w, const Tensor* bias, Tensor& y);
  cuda::QuantMatrix quant_matrix(const LinearWeights& w) const;
  void quantised_gemv(const Tensor& x, std::span<const LinearWeights* const> weights, std::span<Tensor* const> outputs,
                      cuda::QuantEpilogue epilogue, const cuda::GemvNorm& norm, const char* op);
  void project_quantised(const Projection& p);
  void project_dequantised(const Projection& p);
  DType dequantised_type() const;  // of a quantised matrix widened for products of many rows
  void dequantise(const LinearWeights& w, Tensor& dense);
  bool runs_cublas(int64_t rows) const;
  // The 16-bit type in which a writer stores p's products' input where `fused` allows it (alloc_normed, alloc_operand).
  std::optional<DType> operand_type(const Projection& p, bool fused) const;
  std::optional<DType> operand_type(const LinearWeights& w, int64_t rows, bool fused) const;
  bool gemv_qkv(const Projection& p, const Tensor& in, bool fold_norm);
  bool gemv_swiglu(const Projection& p, const Tensor& in, bool fold_norm);
  bool gemv_accumulate(const Projection& p, const Tensor& in);
  bool gemm_batched(const Projection& p, const Tensor& in);
  static std::size_t room_offset(int64_t count);
  float* product_room(const Tensor& y, Tensor& workspace);
  bool gemm_packed(const Projection& p, const Tensor& in);
  void cublas_product(const Tensor& x, const void* w, DType w_type, float* y, int64_t n);
  Tensor as_stored(const Tensor& host) const;
  bool gemm_swiglu_packed(const Projection& p, const Tensor& in);
  void products(const Projection& p, const Tensor& in, bool fold);
  static bool narrowed_outputs(const Projection& p);
  void products_narrowed(const Projection& p, const Tensor& in, bool fold);
  void through_f32(const Projection& p, const std::function<void(const Projection&)>& run);
  void residual_epilogue(const Projection& p, const Tensor& in);

  // cuda_head_pick.cpp
  bool picks_from_bounds(const Projection& head) const;
  void bounded_head(const Projection& head, int64_t vocabulary, int top_k, double temperature, Tensor* pick);

  // cuda_rows.cpp
  void add_norm(Tensor& x, const Tensor& residual, const Tensor* residual_bias, const RowNorm& norm, Tensor& y);
  void elementwise(cuda::Elementwise op, const Tensor& a, const Tensor* b, Tensor& y);
  void scatter(Tensor& x, const Tensor& src, std::span<const int64_t> rows, bool accumulate);

  // cuda_attention.cpp: the mask's host lists on the device, uploaded once while they stay the same (every layer of
  // a forward pass passes the same mask). A recording uploads its own copy (it keeps what it allocates).
  struct UploadedList {
    std::vector<int64_t> host;
    Tensor device;
  };
  struct DeviceMask;
  Tensor uploaded(const std::vector<int64_t>& values, UploadedList& slot);
  bool tiled_attention(const Tensor& q, const AttentionMask& mask) const;
  bool tensor_core_rows(int64_t rows, int64_t head_dim) const;
  bool on_tensor_cores(const Tensor& q, const AttentionMask& mask) const;
  cuda::QkNormRopeAppendArgs head_args(const HeadNormRopeAppend& op) const;
  void attention_fused(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask,
                       float scale, Tensor& out);
  void attention_unfused(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask,
                         float scale, Tensor& out);

  CudaContext ctx_;
  CudaEventTimer timer_;
  std::unique_ptr<DeviceInterop> interop_;
  Tensor attention_arrivals_;  // the split decode attention's per-pair counters (zeroed once, left zero by each call)
  Tensor greedy_pick_workspace_;  // greedy_pick's blocks' picks and counter (zeroed once, likewise)
  Tensor top_k_workspace_;        // top_k_candidates' blocks' lists and counter (the counter zeroed once, likewise)
  // The output head's bounds copy (prepare_head_pick) and its kernels' workspace (zeroed once, likewise).
  struct HeadBounds {
    Tensor head;                 // the head it was made from, kept alive: copy.weight stays its (no address reused)
    Tensor block, workspace;     // block: the values, then the scales (copy's pointers into it)
    cuda::HeadBoundsCopy copy;
  };
  std::optional<HeadBounds> head_bounds_;
  FaultInjection sampling_faults_;  // candidates_do_not_fit and draws_one_late (inject_fault)
  std::optional<cuda::StepHandoffArgs> closing_handoff_;  // hand_off_step while recording: launched by end_recording
  PendingReads pending_reads_;    // read_later's page-locked slots
  std::shared_ptr<HandedBlocks> handed_ = std::make_shared<HandedBlocks>();  // alloc_handed's blocks
  DType cache_type_ = DType::BF16;  // the KV cache's elements (kv_cache.cuh): bf16 unless asked for f32
  UploadedList mask_bounds_, mask_layout_;
  // project_then_heads: the attention prologue gemm_packed may run from its packed rows (it clears this when it has).
  const HeadNormRopeAppend* heads_after_ = nullptr;
};

// The RMSNorm a GEMV folds in (fold false: none).
cuda::GemvNorm gemv_norm(const RowNorm& norm, bool fold);

}  // namespace qvl
