#include "runtime/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include "backend/weight_format.h"
#include "core/error.h"
#include "io/tensor_layout.h"
#include "model/text_decoder.h"

namespace qvl {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;
// The pool (kernels/memory_pool.h) rounds every block to 512 bytes and carves blocks under 10 MiB out of shared
// 2 MiB and 20 MiB segments: the last segment of each kind is partly empty, and freed blocks leave holes there.
constexpr uint64_t kBlock = 512, kLargeBlock = 2 * kMiB, kLarge = 10 * kMiB;
constexpr uint64_t kSmallSegment = 2 * kMiB, kMidSegment = 20 * kMiB;
// Prompts longer than this run as several passes when the budget does not fit a whole-context pass.
constexpr int64_t kSmallChunk = 512;

uint64_t pool_rounded(uint64_t bytes) {
  const uint64_t unit = bytes >= kLarge ? kLargeBlock : kBlock;
  return (bytes + unit - 1) / unit * unit;
}
// What `count` blocks of `bytes` each take from the pool when allocated together: under 1 MiB they share 2 MiB
// segments, under 10 MiB 20 MiB segments (two 8 MiB blocks take one and leave a 4 MiB hole), larger ones their
// own rounded size. The holes may serve smaller blocks later; the plan does not count on it.
uint64_t pool_bytes(uint64_t count, uint64_t bytes) {
  const uint64_t block = pool_rounded(bytes);
  if (block == 0 || count == 0) return 0;
  if (block >= kLarge) return count * block;
  const uint64_t segment = block <= kMiB ? kSmallSegment : kMidSegment, per_segment = segment / block;
  return (count + per_segment - 1) / per_segment * segment;
}
uint64_t u(int64_t v) { return uint64_t(std::max<int64_t>(v, 0)); }

// The largest n in [fits, most] with fits_at(n), fits_at(fits) being true and fits_at non-increasing: the upper
// bound doubles until it no longer fits, then a bisection.
int64_t largest_fitting(int64_t fits, int64_t most, const std::function<bool(int64_t)>& fits_at) {
  int64_t step = 1, over = fits + 1;
  while (over <= most && fits_at(over)) {
    fits = over;
    step *= 2;
    over = fits + step;
  }
  over = std::min(over, most + 1);
  while (over - fits > 1) {
    const int64_t mid = fits + (over - fits) / 2;
    (fits_at(mid) ? fits : over) = mid;
  }
  return fits;
}
double mib(uint64_t bytes) { return double(bytes) / double(kMiB); }
std::string mib_text(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", mib(bytes));
  return text;
}

// Weight bytes per part as one device holds them, and the most quantised elements each side widens at once for
// products of many rows (its dequantised workspace): a matrix, or on a GPU whose products run on cuBLAS, a decoder
// layer's q, k and v or its gate and up together (CudaBackend::project_dequantised).
struct WeightBytes {
  uint64_t vision = 0, head = 0;  // head: the embedding table, the output head, the final norm
  std::vector<uint64_t> layer;
  uint64_t widest_decoder_quantised = 0, widest_vision_quantised = 0;  // elements (n · k)
  // Parts with a tensor the pool carves from a shared 20 MiB segment (over 1 MiB, under 10 MiB).
  bool mid_vision = false, mid_decoder = false, mid_head = false;
};

// The matrices the CUDA backend stores as one unit (Backend::upload_linears: a decoder layer's q, k and v; its gate
// and up) where they are floats on the GPU, and widens together where they are q8/q4 and cuBLAS runs their products
// (CudaBackend::project_dequantised): "" for any other tensor.
std::string packed_group(const std::string& name) {
  for (const char* part : {".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.v_proj."})
    if (name.find(part) != std::string::npos) return name.substr(0, name.find(part)) + " qkv";
  for (const char* part : {".mlp.gate_proj.", ".mlp.up_proj."})
    if (name.find(part) != std::string::npos) return name.substr(0, name.find(part)) + " gate_up";
  return {};
}

WeightBytes weight_bytes(const ModelConfig& c, const MemoryPlanRequest& r, bool gpu) {
  WeightBytes w;
  w.layer.assign(std::size_t(c.text.num_hidden_layers), 0);
  const std::string layers = "model.language_model.layers.";
  std::map<std::string, uint64_t> packed;  // a packed unit's raw bytes, by layer and group
  std::map<std::string, uint64_t> widened_together;  // quantised elements a projection widens at once, by group
  const auto count = [&](const std::string& name, uint64_t bytes, uint64_t quantised_elements) {
    const bool mid = bytes > kMiB && bytes < kLarge;
    if (name.starts_with("model.visual.")) {
      w.vision += bytes;
      w.mid_vision |= mid;
      w.widest_vision_quantised = std::max(w.widest_vision_quantised, quantised_elements);
    } else if (name.starts_with(layers)) {
      const auto l = std::stoll(name.substr(layers.size()));
      w.layer[std::size_t(l)] += bytes;
      w.mid_decoder |= mid;
      w.widest_decoder_quantised = std::max(w.widest_decoder_quantised, quantised_elements);
    } else {
      w.head += bytes;
      w.mid_head |= mid;
    }
  };
  for (const TensorSpec& spec : expected_tensors(c)) {
    const int64_t rows = spec.shape[0], in = shape_numel(spec.shape) / std::max<int64_t>(rows, 1);
    const std::optional<QuantisedAs> as = r.formats ? quantised_as(spec, *r.formats) : std::nullopt;
    if (as) {
      const WeightFormatTraits& f = format_traits(as->format);
      count(spec.name,
            pool_rounded(u(rows * f.row_bytes(in, as->group))) + pool_rounded(u(rows * f.groups(in, as->group) * 2)),
            u(rows * in));
      const std::string group = gpu && r.gpu_narrows_product_inputs ? packed_group(spec.name) : std::string();
      if (!group.empty()) widened_together[group] += u(rows * in);
      continue;
    }
    const uint64_t bytes = u(shape_numel(spec.shape)) * dtype_size(gpu ? r.gpu_floats : r.checkpoint_floats);
    const std::string group = gpu && spec.name.ends_with(".weight") ? packed_group(spec.name) : std::string();
    if (!group.empty()) packed[group] += bytes;  // one pool block for the unit, rounded and classed as a whole
    else count(spec.name, gpu ? pool_rounded(bytes) : bytes, 0);
  }
  for (const auto& [group, bytes] : packed) count(group, pool_rounded(bytes), 0);
  for (const auto& [group, elements] : widened_together)
    w.widest_decoder_quantised = std::max(w.widest_decoder_quantised, elements);
  return w;
}

uint64_t sum(const std::vector<uint64_t>& v, int64_t first, int64_t end) {
  uint64_t s = 0;
  for (int64_t i = first; i < end; ++i) s += v[std::size_t(i)];
  return s;
}

// What the GPU's activations and workspaces take at their peak, per phase (docs/memory-plan.md).
struct ActivationModel {
  const ModelConfig& c;
  const MemoryPlanRequest& r;
  uint64_t a = dtype_size(r.gpu_activations);
  // A quantised matrix widened for products of many rows (CudaBackend::dequantised_type): bf16 where cuBLAS runs
  // them, f32 for the SM61 profile's tiled GEMM.
  uint64_t widened = r.gpu_narrows_product_inputs ? 2 : 4;
  // A 16-bit GEMM operand's bytes an element: none on the SM61 profile, whose tiled GEMM reads f32 rows.
  uint64_t operand_bytes = r.gpu_narrows_product_inputs ? 2 : 0;
  // Whether the decoder's q, k and v run as one packed product there (CudaBackend::gemm_packed: cuBLAS, 16-bit
  // matrices without biases, quantised ones widened together first), its f32 result a workspace beside the operands.
  bool packs_qkv =
      r.gpu_narrows_product_inputs && (r.formats || r.gpu_floats != DType::F32) && !c.text.attention_bias;

  // One decoder pass over `rows` tokens: x, proj, q, attn, k, v, gate, up, the norm slot, rotary rows, ids; the
  // dequantised matrices of a multi-row quantised product (a layer's q, k and v or gate and up together on cuBLAS);
  // where cuBLAS runs the products, the 16-bit operands it reads (the SwiGLU's, written by it and alive through the
  // pass) and beside them the larger of the attention's output for o in the 16-bit type (counted at f32 in the pass; a
  // kernel other than the tensor-core one writes it through an f32 workspace, counted here at 16 bits: together the
  // same bytes) and the f32 result of the packed q+k+v product (gemm_packed); the logits when the head is here. The
  // recorded decode step's own one-row buffers stay beside it, with its ring of rotary rows (TextDecoder).
  uint64_t decoder(int64_t rows, bool head, uint64_t widest_quantised) const {
    const TextConfig& t = c.text;
    const int64_t q = t.num_attention_heads * t.head_dim, kv = t.num_key_value_heads * t.head_dim;
    const auto pass = [&](int64_t s) {
      return a * u(s) * u(3 * t.hidden_size + 2 * q + 2 * kv + 2 * t.intermediate_size + 2 * t.head_dim) + 8 * u(s) +
             (head ? a * u(t.vocab_size + t.hidden_size) : 0);
    };
    const uint64_t packed_qkv = packs_qkv ? 4 * u(rows) * u(q + 2 * kv) : 0;
    const uint64_t operand =
        operand_bytes * u(rows) * u(t.intermediate_size) + std::max(operand_bytes * u(rows) * u(q), packed_qkv);
    const uint64_t workspace = (rows > 4 ? widest_quantised * widened : 0) + operand;
    const uint64_t rotary_ring = 4 * u(TextDecoder::kRotaryRingRows * 2 * t.head_dim);
    return pass(rows) + pass(1) + rotary_ring + workspace;
  }
  // The vision tower over one image of `tokens` merged tokens: its patches, the block activations (eight of the hidden
  // width: x, q, k, v, attn, proj, norm slot, and one for k and v in f16 with their products' f32 room after them,
  // where the tensor-core attention reads them (Backend::alloc_keys_values: 12 bytes a value for the pair against
  // f32's 8); the MLP; rotary rows), the widest product's workspace and the 16-bit
  // operands (the GELU's for fc2, alive through the tower, beside the widest conversion; a merger's slot beside its
  // fc1's converted input, two of the hidden width), the mergers. (The position embedding, once an eighth, is blended
  // into x on the device.)
  uint64_t vision(int64_t tokens, uint64_t widest_quantised) const {
    const VisionConfig& v = c.vision;
    const int64_t merge = v.spatial_merge_size * v.spatial_merge_size, n = tokens * merge;
    const uint64_t blocks = a * u(n) * u(8 * v.hidden_size + v.intermediate_size + v.patch_dim() + 2 * v.head_dim());
    const uint64_t workspace =
        (widest_quantised ? widest_quantised * widened : 0) +
        operand_bytes * u(n) * u(v.intermediate_size + std::max(2 * v.hidden_size, v.patch_dim()));
    const uint64_t mergers = a * u(tokens) * u(2 * v.merged_dim() + c.text.hidden_size);
    return blocks + workspace + mergers + outputs(tokens);
  }
  // The image embeddings and DeepStack features, alive through the prefill.
  uint64_t outputs(int64_t tokens) const {
    return a * u(tokens) * u(c.text.hidden_size) * (1 + c.vision.deepstack_visual_indexes.size());
  }
};

std::string layer_range(int64_t first, int64_t end) {
  return end - first == 1 ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(end - 1);
}
std::string layers_text(int64_t first, int64_t end) {
  return (end - first == 1 ? "layer " : "layers ") + layer_range(first, end);
}

}  // namespace

uint64_t kv_bytes_per_token(const TextConfig& t, int64_t layers, DType cache) {
  return 2 * u(layers) * u(t.num_key_value_heads * t.head_dim) * dtype_size(cache);
}

uint64_t kv_cache_pool_bytes(const TextConfig& t, int64_t layers, int64_t tokens, DType cache) {
  return pool_bytes(2 * u(layers), u(tokens) * kv_bytes_per_token(t, 1, cache) / 2);
}

MemoryPlan plan_memory(const ModelConfig& c, const MemoryPlanRequest& r) {
  if (r.context <= 0) fail("memory plan: the context to plan for must be positive (got ", r.context, ")");
  const int64_t n_layers = c.text.num_hidden_layers;
  const WeightBytes gpu = weight_bytes(c, r, true), cpu = weight_bytes(c, r, false);
  const ActivationModel act{c, r};
  const uint64_t kv_block = u(r.context) * kv_bytes_per_token(c.text, 1, r.kv_cache) / 2;
  const int64_t image_tokens = r.image_tokens > 0 ? std::min(r.image_tokens, r.context) : r.context;

  // The pool's peak for one arrangement: weights, then the larger of the vision phase and the decoder phase (the
  // vision activations are freed before the KV cache and the prefill's activations are allocated).
  struct Arrangement {
    bool vision_on_gpu;
    int64_t gpu_layers;
    bool head_on_gpu;
    int64_t chunk;
  };
  // A partly used small segment always; a partly used mid segment where the GPU holds blocks of 1 to 10 MiB: a
  // weight matrix or a layer's K or V (any real model; the demo model has none).
  const auto slack = [&](const Arrangement& p) {
    const bool mid = (p.vision_on_gpu && gpu.mid_vision) || (p.gpu_layers > 0 && gpu.mid_decoder) ||
                     (p.head_on_gpu && gpu.mid_head) || (p.gpu_layers > 0 && kv_block > kMiB && kv_block < kLarge);
    return kSmallSegment + (mid ? kMidSegment : 0);
  };
  // Each phase's peak less what grows with the tokens (the weights, the buffers, the slack; the decoder pass's
  // activations), and what does.
  uint64_t head_bounds = 0;  // the bounds copy's pool bytes, once the arrangement is chosen
  const auto fixed = [&](const Arrangement& p) {
    return r.reserved + (p.vision_on_gpu ? gpu.vision : 0) + sum(gpu.layer, 0, p.gpu_layers) +
           (p.head_on_gpu ? gpu.head + head_bounds : 0) + slack(p);
  };
  const auto vision_phase = [&](const Arrangement& p, int64_t vision_tokens) -> uint64_t {
    return p.vision_on_gpu ? act.vision(vision_tokens, gpu.widest_vision_quantised) : 0;
  };
  const auto decoder_pass = [&](const Arrangement& p) {
    return act.decoder(p.chunk, p.head_on_gpu, gpu.widest_decoder_quantised);
  };
  const auto peak = [&](const Arrangement& p, int64_t kv_tokens, int64_t vision_tokens) {
    const uint64_t decoder_phase = kv_cache_pool_bytes(c.text, p.gpu_layers, kv_tokens, r.kv_cache) + decoder_pass(p) +
                                   act.outputs(vision_tokens);
    return fixed(p) + std::max(vision_phase(p, vision_tokens), decoder_phase);
  };
  std::vector<int64_t> chunks{r.context};
  if (r.context > kSmallChunk) chunks.push_back(kSmallChunk);
  // In order of preference: everything; the vision tower on the CPU; then fewer decoder layers.
  std::vector<Arrangement> order;
  for (int64_t chunk : chunks) order.push_back({true, n_layers, true, chunk});
  for (int64_t chunk : chunks) order.push_back({false, n_layers, true, chunk});
  for (int64_t k = n_layers; k >= 1; --k)
    for (int64_t chunk : chunks) order.push_back({false, k, false, chunk});
  const auto chosen =
      std::find_if(order.begin(), order.end(), [&](const Arrangement& p) { return peak(p, r.context, image_tokens) <= r.budget; });
  if (chosen == order.end())
    fail("a GPU memory budget of ", mib_text(r.budget), " is below the smallest plan: the first decoder layer, its KV "
         "cache for ", r.context, " tokens and the activations need ", mib_text(peak(order.back(), r.context, image_tokens)),
         " (everything on the GPU needs ", mib_text(peak(order.front(), r.context, image_tokens)), "); give the GPU more memory, plan for less context, choose "
         "smaller weights (--weights q4), or run on the CPU (--device cpu)");

  // The head's bounds copy only beside everything else with the context asked for: a decode step reads it instead of
  // the head (321 MB for 622 at the 2B's bf16), but it is the first thing to go when memory is short.
  if (r.head_bounds && chosen->vision_on_gpu && chosen->head_on_gpu && chosen->gpu_layers == n_layers) {
    head_bounds = pool_bytes(1, r.head_bounds);
    if (peak(*chosen, r.context, image_tokens) > r.budget) head_bounds = 0;
  }

  MemoryPlan plan;
  plan.budget = r.budget;
  plan.head_bounds = head_bounds;
  plan.vision_on_gpu = chosen->vision_on_gpu;
  plan.layers = n_layers;
  plan.gpu_layers = chosen->gpu_layers;
  plan.head_on_gpu = chosen->head_on_gpu;
  plan.context = r.context;
  plan.prefill_chunk = chosen->chunk;
  plan.gpu_peak = peak(*chosen, r.context, image_tokens);
  // Both phases are affine in the tokens (ActivationModel): their value at 0 and their step.
  if (chosen->vision_on_gpu) {
    plan.vision_pass_base = fixed(*chosen) + vision_phase(*chosen, 0);
    plan.vision_pass_per_token = vision_phase(*chosen, 1) - vision_phase(*chosen, 0);
  }
  plan.prefill_base = fixed(*chosen) + decoder_pass(*chosen);
  plan.image_features_per_token = act.outputs(1);
  // The longest context whose cache still fits beside the rest (the pool's segments make the cost a step function:
  // flat over a segment's worth of tokens, so the bound is found by doubling, not from the raw bytes per token).
  plan.context_room = largest_fitting(r.context, int64_t(1) << 40,
                                      [&](int64_t tokens) { return peak(*chosen, tokens, image_tokens) <= r.budget; });
  // Likewise the image tokens one vision pass (all a request's images) may take: at least the largest image's, at
  // most the context's.
  plan.image_room = largest_fitting(image_tokens, std::max(image_tokens, plan.context_room),
                                    [&](int64_t tokens) { return peak(*chosen, r.context, tokens) <= r.budget; });

  const auto add = [&](std::string name, bool on_gpu, uint64_t bytes) {
    if (bytes) plan.parts.push_back({std::move(name), on_gpu, bytes});
  };
  const WeightBytes& vision_side = plan.vision_on_gpu ? gpu : cpu;
  add("vision tower", plan.vision_on_gpu, vision_side.vision);
  const int64_t k = plan.gpu_layers;
  if (k > 0) add("decoder layers " + layer_range(0, k), true, sum(gpu.layer, 0, k));
  if (k < n_layers) add("decoder layers " + layer_range(k, n_layers), false, sum(cpu.layer, k, n_layers));
  add(c.tie_word_embeddings ? "embedding table (tied output head), final norm" : "embedding table, output head, final norm",
      plan.head_on_gpu, (plan.head_on_gpu ? gpu : cpu).head);
  add("output head's bounds copy (int8, for picks on the GPU)", true, head_bounds);
  // A head the plan leaves to the CPU has its copy in the host's memory (made there where a quarter of the machine's
  // memory stays free: CpuBackend::prepare_head_pick).
  if (!plan.head_on_gpu) add("output head's bounds copy (int8, for picks on the CPU)", false, r.head_bounds);
  const std::string tokens = std::to_string(r.context) + " tokens";
  if (k > 0)
    add("kv cache, layers " + layer_range(0, k) + ", " + tokens, true,
        kv_cache_pool_bytes(c.text, k, r.context, r.kv_cache));
  if (k < n_layers)
    add("kv cache, layers " + layer_range(k, n_layers) + ", " + tokens, false,
        kv_bytes_per_token(c.text, n_layers - k, r.kv_cache) * u(r.context));
  add("the backend's own buffers", true, r.reserved);
  add("activations, workspaces, pool slack (peak)", true, plan.gpu_peak - [&] {
    uint64_t placed = 0;
    for (const PlannedPart& p : plan.parts) placed += p.on_gpu ? p.bytes : 0;
    return placed;
  }());
  return plan;
}

void MemoryPlan::drop_head_bounds() {
  std::erase_if(parts, [](const PlannedPart& p) { return p.name.starts_with("output head's bounds copy"); });
  gpu_peak -= head_bounds;  // the parts still add up to the peak
  head_bounds = 0;
}

uint64_t MemoryPlan::room_beside_vision_pass(int64_t tokens) const {
  if (!vision_on_gpu) return budget;
  const uint64_t pass = vision_pass_base + u(tokens) * vision_pass_per_token;
  return pass < budget ? budget - pass : 0;
}

uint64_t MemoryPlan::room_beside_prefill(int64_t image_tokens) const {
  const uint64_t pass = prefill_base + u(image_tokens) * image_features_per_token;
  return pass < budget ? budget - pass : 0;
}

std::string MemoryPlan::summary() const {
  char line[256];
  if (everything_on_gpu())
    std::snprintf(line, sizeof line, "everything on the GPU");
  else if (!decoder_split())
    std::snprintf(line, sizeof line, "vision tower on the CPU, the decoder on the GPU");
  else  // the planner moves the vision tower off the GPU before any decoder layer
    std::snprintf(line, sizeof line, "vision tower on the CPU; decoder %s on the GPU, %sthe output head on the CPU",
                  layers_text(0, gpu_layers).c_str(),
                  gpu_layers < layers ? (layers_text(gpu_layers, layers) + " and ").c_str() : "");
  char tail[160];
  std::snprintf(tail, sizeof tail, " (GPU peak %.0f of %.0f MiB; room for %lld tokens of context)", mib(gpu_peak),
                mib(budget), (long long)context_room);
  return std::string(line) + tail;
}

std::string MemoryPlan::table() const {
  std::string out;
  for (const PlannedPart& p : parts) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-4s %10.1f MiB  %s\n", p.on_gpu ? "gpu" : "cpu", mib(p.bytes), p.name.c_str());
    out += line;
  }
  return out;
}

}  // namespace qvl
