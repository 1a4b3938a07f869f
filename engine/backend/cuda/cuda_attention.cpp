// Attention on the CUDA backend: the fused kernels (tiled flash on tensor cores or CUDA cores for prefill and vision,
// one warp per pair or the split decode kernel for few queries) or, with the flash fusion off, the unfused reference
// through a score matrix in memory; and the decoder's attention prologue (q/k head norms, RoPE, cache append).
#include <algorithm>

#include "attention.cuh"
#include "attention_tap.cuh"
#include "attention_unfused.cuh"
#include "backend/op_costs.h"
#include "common.cuh"
#include "convert.cuh"
#include "core/error.h"
#include "cuda_backend.h"
#include "flash_attention.cuh"
#include "flash_attention_mma.cuh"
#include "qk_norm_rope_append.cuh"

namespace qvl {

// An attention mask's host-side lists (segment bounds, block layout) on the device, for the kernels.
struct CudaBackend::DeviceMask {
  Tensor bounds, layout;  // empty where the mask has none
  DeviceMask(CudaBackend& be, const AttentionMask& mask)
      : bounds(mask.kind == AttentionMask::Kind::Segments ? be.uploaded(mask.bounds, be.mask_bounds_) : Tensor()),
        layout(mask.block_layout.empty() ? Tensor() : be.uploaded(mask.block_layout, be.mask_layout_)) {}
  // The kernels' arguments for this mask.
  cuda::AttentionArgs args(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask,
                           float scale, Tensor& out) const {
    // f16 keys and values (alloc_keys_values) reach the tensor-core kernel only: attention() widens them for others.
    const bool f16 = k.dtype() == DType::F16 && v.dtype() == DType::F16 && k.device() == Device::CUDA &&
                     v.device() == Device::CUDA;
    const auto [keys, values] =
        f16 ? std::pair{KvData{const_cast<void*>(k.raw()), false}, KvData{const_cast<void*>(v.raw()), false}}
            : kv_pair(k, v, "attention");
    return {.q = f32(q),
            .k = keys.data,
            .v = values.data,
            .kv_type = f16 ? cuda::WeightType::F16 : keys.bf16 ? cuda::WeightType::BF16 : cuda::WeightType::F32,
            .out = out.dtype() == DType::F32 ? f32(out) : nullptr,
            .operand = out.dtype() == DType::F32 ? nullptr : out.raw(),
            .operand_type = weight_type(out.dtype()),
            .s = q.dim(0),
            .hq = q.dim(1),
            .hkv = k.dim(1),
            .d = q.dim(2),
            .kv_len = kv_len,
            .scale = scale,
            .causal = mask.kind == AttentionMask::Kind::Causal,
            .past = mask.past,
            .bounds = bounds.raw() ? bounds.data<int64_t>() : nullptr,
            .segments = int64_t(mask.bounds.size()) - 1,
            .layout = layout.raw() ? layout.data<int64_t>() : nullptr,
            .layout_side = mask.layout_side};
  }
};

Tensor CudaBackend::uploaded(const std::vector<int64_t>& values, UploadedList& slot) {
  const auto upload = [&] {
    Tensor t = ctx_.device_tensor(DType::I64, {int64_t(values.size())}, pool::Owner::Workspace);
    write_indices(t, values);
    return t;
  };
  if (ctx_.recording) return upload();
  if (!slot.device.raw() || slot.host != values) slot = {values, upload()};
  return slot.device;
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, const AttentionMask& mask,
                            float scale, Tensor& out) {
  if (q.rank() != 3 || k.rank() != 3 || v.shape() != k.shape() || q.dim(1) % k.dim(1) != 0 || k.dim(2) != q.dim(2) ||
      kv_len > k.dim(0) || out.numel() != q.numel())
    fail("attention: shapes q ", shape_to_string(q.shape()), " k ", shape_to_string(k.shape()), " v ",
         shape_to_string(v.shape()), " out ", shape_to_string(out.shape()), " with ", kv_len, " keys do not fit");
  const bool tensor_cores = fusions_.flash_attention && on_tensor_cores(q, mask);
  if (k.dtype() == DType::F16 && !tensor_cores) {
    // Keys and values in f16 (alloc_keys_values) for a kernel that reads f32 ones (fusions changed since): widened,
    // exactly.
    if (v.dtype() != DType::F16) fail("attention: f16 keys with ", dtype_name(v.dtype()), " values");
    Tensor keys = ctx_.device_tensor(DType::F32, k.shape(), pool::Owner::Workspace),
           values = ctx_.device_tensor(DType::F32, v.shape(), pool::Owner::Workspace);
    {
      const GpuTimer timer = timed([&] { return op_cost::elementwise("widen", k, 2, keys); });
      cuda::widen_to_f32(k.raw(), cuda::WeightType::F16, f32(keys), k.numel(), ctx_.stream);
      cuda::widen_to_f32(v.raw(), cuda::WeightType::F16, f32(values), v.numel(), ctx_.stream);
    }
    return attention(q, keys, values, kv_len, mask, scale, out);
  }
  if (out.dtype() != DType::F32 && !tensor_cores) {
    // A 16-bit operand slot (alloc_for_product) that only the tensor-core kernel writes: the other kernels' f32
    // result, narrowed into it (the same rounding).
    Tensor result = ctx_.device_tensor(DType::F32, out.shape(), pool::Owner::Workspace);
    attention(q, k, v, kv_len, mask, scale, result);
    const GpuTimer timer = timed([&] { return op_cost::elementwise("narrow", result, 1, out); });
    cuda::narrow_f32(f32(result), out.raw(), weight_type(out.dtype()), out.numel(), ctx_.stream);
    return;
  }
  if (fusions_.flash_attention) attention_fused(q, k, v, kv_len, mask, scale, out);
  else attention_unfused(q, k, v, kv_len, mask, scale, out);
}

// Whether the fused attention of these queries runs a tiled kernel (prefill rows), and the tensor-core one (the head
// sizes it takes; tensor_core_rows answers it for a shape, as alloc_for_product asks).
bool CudaBackend::tiled_attention(const Tensor& q, const AttentionMask& mask) const {
  return !mask.past_on_device && q.dim(0) >= ctx_.profile->flash_min_queries;
}
bool CudaBackend::tensor_core_rows(int64_t rows, int64_t head_dim) const {
  return rows >= ctx_.profile->flash_min_queries && ctx_.tensor_core_attention && cuda::flash_attention_mma_fits(head_dim);
}
bool CudaBackend::on_tensor_cores(const Tensor& q, const AttentionMask& mask) const {
  return !mask.past_on_device && tensor_core_rows(q.dim(0), q.dim(2));
}

void CudaBackend::attention_fused(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len,
                                  const AttentionMask& mask, float scale, Tensor& out) {
  const int64_t s = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t* past_on_device = mask.past_on_device ? mask.past_on_device->data<int64_t>() : nullptr;
  const bool tiled = tiled_attention(q, mask), tensor_cores = on_tensor_cores(q, mask);
  const bool sparse = !mask.block_layout.empty();
  static_assert(cuda::kFlashLayoutBlock == AttentionMask::kSparseBlock);
  mask.check_block_layout(s);
  if (sparse && !(tiled && (tensor_cores || cuda::flash_attention_fits(d))))
    fail("attention: a block-sparse layout runs in the tiled kernels only: at least ", ctx_.profile->flash_min_queries,
         " queries (prefill) and head_dim a multiple of 4 up to 128; here ", s, " and ", d);
  const GpuTimer timer = timed([&] {
    KernelEvent event = op_cost::attention(q, k, kv_len, mask);
    if (tensor_cores) event.name += " tensor cores";
    return event;
  });
  const DeviceMask dev(*this, mask);  // holds the lists' device copies while the kernels are queued
  const cuda::AttentionArgs args = dev.args(q, k, v, kv_len, mask, scale, out);
  if (tensor_cores) {
    cuda::flash_attention_mma(args, ctx_.multiprocessors, ctx_.stream);
    return;
  }
  if (tiled && cuda::flash_attention_fits(d)) {
    cuda::flash_attention(args, ctx_.stream);
    return;
  }
  const bool split_keys = past_on_device || s * hq < ctx_.profile->split_below_pairs_per_sm * ctx_.multiprocessors;
  const int64_t floats = split_keys ? cuda::attention_split_workspace(args, ctx_.multiprocessors) : 0;
  if (floats && s * hq > attention_arrivals_.numel())
    fail("attention: ", s * hq, " (query, head) pairs with the position on the device; the split kernel counts up to ",
         attention_arrivals_.numel());
  Tensor workspace = floats ? ctx_.device_tensor(DType::F32, {floats}, pool::Owner::Workspace) : Tensor();
  const cuda::SplitDecode split{.split_keys = split_keys,
                                 .past_on_device = past_on_device,
                                 .workspace = floats ? workspace.data<float>() : nullptr,
                                 .arrivals = reinterpret_cast<unsigned*>(attention_arrivals_.raw()),
                                 .multiprocessors = ctx_.multiprocessors,
                                 .overlap = ctx_.overlapped_launches};
  cuda::attention(args, split, ctx_.stream);
}

// Three kernels through a score matrix in memory, in chunks of queries whose scores fit 64 MB. A recorded decode
// step (its position on the device) keeps the decode kernel: the reference is for prefill, vision and eager decode.
void CudaBackend::attention_unfused(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len,
                                    const AttentionMask& mask, float scale, Tensor& out) {
  if (mask.past_on_device) return attention_fused(q, k, v, kv_len, mask, scale, out);
  const int64_t s = q.dim(0), hq = q.dim(1), hkv = k.dim(1), d = q.dim(2);
  mask.check_block_layout(s);
  if (s == 0 || hq == 0 || kv_len == 0) return;
  const DeviceMask dev(*this, mask);
  const cuda::AttentionArgs args = dev.args(q, k, v, kv_len, mask, scale, out);
  const int64_t chunk = std::clamp<int64_t>((int64_t(64) << 20) / 4 / std::max<int64_t>(1, hq * kv_len), 1, s);
  Tensor scores = ctx_.device_tensor(DType::F32, {std::max<int64_t>(1, chunk * hq * kv_len)}, pool::Owner::Workspace);
  for (int64_t first = 0; first < s; first += chunk) {
    const int64_t rows = std::min(chunk, s - first);
    const double matrix = double(rows * hq * kv_len) * 4, keys = double(kv_len * hkv * d) * double(dtype_size(k.dtype()));
    {
      const GpuTimer timer = timed([&] {
        return op_cost::make("attention scores d=" + std::to_string(d), matrix + keys, 2.0 * matrix / 4 * double(d));
      });
      cuda::attention_scores(args, first, rows, scores.data<float>(), ctx_.stream);
    }
    {
      const GpuTimer timer = timed([&] { return op_cost::make("attention softmax", 3 * matrix, 3 * matrix / 4); });
      cuda::attention_softmax(scores.data<float>(), rows, hq, kv_len, ctx_.stream);
    }
    const GpuTimer timer = timed([&] {
      return op_cost::make("attention weighted sum d=" + std::to_string(d), matrix + keys, 2.0 * matrix / 4 * double(d));
    });
    cuda::attention_weighted_sum(args, first, rows, scores.data<float>(), ctx_.stream);
  }
}

// The fused prologue where the fusion is on; the GPU's unfused sequence otherwise.
void CudaBackend::qk_norm_rope_append(const HeadNormRopeAppend& op) {
  if (!fusions_.qk_norm_rope_append) return qk_norm_rope_append_unfused(*this, op);
  check_head_norm_rope_append(op);
  const GpuTimer timer = timed([&] { return op_cost::qk_norm_rope_append(*op.q, *op.k, *op.cos); });
  cuda::qk_norm_rope_append(head_args(op), ctx_.overlapped_launches, ctx_.stream);
}

// The projection first; where gemm_packed ran it, the prologue reads the packed rows it left (no split_columns), and
// gemm_packed clears heads_after_.
void CudaBackend::project_then_heads(const Projection& p, const HeadNormRopeAppend& op) {
  heads_after_ = &op;
  try {
    project(p);
  } catch (...) {
    heads_after_ = nullptr;
    throw;
  }
  const bool ran = heads_after_ == nullptr;
  heads_after_ = nullptr;
  if (!ran) qk_norm_rope_append(op);
}

// The fused kernel's arguments for op (q, k, v in their own tensors; the caches).
cuda::QkNormRopeAppendArgs CudaBackend::head_args(const HeadNormRopeAppend& op) const {
  const Tensor &q = *op.q, &k = *op.k, &cache_k = *op.cache_k;
  const auto [keys, values] = kv_pair(cache_k, *op.cache_v, "qk_norm_rope_append");
  const int64_t s = q.dim(0), hq = q.dim(1), hkv = k.dim(1), d = q.dim(2);
  return cuda::QkNormRopeAppendArgs{.q = f32(q),
                                        .k = f32(k),
                                        .v = f32(*op.v),
                                        .q_norm = op.q_norm->raw(),
                                        .q_norm_type = weight_type(op.q_norm->dtype()),
                                        .k_norm = op.k_norm->raw(),
                                        .k_norm_type = weight_type(op.k_norm->dtype()),
                                        .eps = op.eps,
                                        .cos = f32(*op.cos),
                                        .sin = f32(*op.sin),
                                        .cache_k = keys.data,
                                        .cache_v = values.data,
                                        .kv_bf16 = keys.bf16,
                                        .row = op.row,
                                        .row_on_device = op.row_on_device ? op.row_on_device->data<int64_t>() : nullptr,
                                        .s = s,
                                        .hq = hq,
                                        .hkv = hkv,
                                        .d = d};
}

void CudaBackend::attention_tap(const AttentionTap& t) {
  check_attention_tap(t);
  const int64_t hq = t.q->dim(1), d = t.q->dim(2), used = t.head < 0 ? hq : 1;
  const GpuTimer timer = timed([&] {
    const double keys = double(t.past_on_device ? t.cache_k->dim(0) : t.kv_len);
    return op_cost::make("attention tap", double(used) * (keys + double(t.count)) * double(d) * double(dtype_size(t.cache_k->dtype())),
                         2.0 * double(used) * (keys + double(t.count)) * double(d));
  });
  if (used > cuda::kMaxTapHeads) fail("attention_tap: ", used, " heads, over the ", cuda::kMaxTapHeads, " the merge holds");
  const int64_t splits = cuda::attention_tap_splits(t.cache_k->dim(0));
  const Tensor scratch = ctx_.device_tensor(DType::F32, {used * (t.count + 2 * splits)}, pool::Owner::Workspace);
  cuda::AttentionTapArgs args;
  args.q = f32(*t.q);
  const KvData keys = kv_data(*t.cache_k);
  args.cache_k = keys.data;
  args.kv_bf16 = keys.bf16;
  args.kv_len = t.kv_len;
  args.past = t.past_on_device ? t.past_on_device->data<int64_t>() : nullptr;
  args.capacity = t.cache_k->dim(0);
  args.first = t.first;
  args.count = t.count;
  args.heads = int(hq);
  args.kv_heads = int(t.cache_k->dim(1));
  args.head_dim = int(d);
  args.head = int(t.head);
  args.scale = t.scale;
  args.scores = const_cast<float*>(scratch.data<float>());
  args.partials = args.scores + used * t.count;
  args.heat = f32(*t.heat);
  cuda::attention_tap(args, ctx_.stream);
}

}  // namespace qvl
