#pragma once
// Where each part of the model lives under a GPU memory budget (the pool's cap): everything on the GPU; else the
// vision tower on the CPU; else the first K decoder layers (with their KV cache) on the GPU and the rest, the final
// norm and the embedding table / output head on the CPU, the hidden state crossing once per forward pass. Bytes are
// counted from the config as the GPU stores each tensor (formats, the profile's float type, the pool's rounding), the
// KV cache for `context` tokens, and the activations and workspaces of the largest pass (docs/memory-plan.md has the
// formulas and how they compare with the pool's measured peaks).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/model_config.h"

namespace qvl {

struct MemoryPlanRequest {
  uint64_t budget = 0;        // bytes the GPU pool may take
  uint64_t reserved = 0;      // bytes it holds already (the backend's own buffers)
  int64_t context = 2048;     // tokens of KV cache the plan keeps room for on the GPU's layers
  int64_t image_tokens = 0;   // merged tokens of the largest image the vision tower takes (0: as many as `context`)
  std::optional<QuantizationConfig> formats;  // the weights' quantisation (the folder's or --weights'); nullopt: floats
  DType checkpoint_floats = DType::BF16;      // the checkpoint's float type (the CPU computes on it in place)
  DType gpu_floats = DType::BF16;             // what the GPU stores float weights in (the SM61 profile: f16)
  DType gpu_activations = DType::F32;         // the GPU's activations
  DType kv_cache = DType::BF16;               // the KV cache on either device (EngineOptions::kv_cache)
  bool gpu_narrows_product_inputs = true;     // BackendLimits::narrows_product_inputs (the SM61 profile: false)
  uint64_t head_bounds = 0;  // bytes of the output head's bounds copy (head_bounds_bytes; 0: the head has none)
};

struct PlannedPart {
  std::string name;   // "vision tower", "decoder layers 0-27", "kv cache (layers 0-27, 2048 tokens)", ...
  bool on_gpu = false;
  uint64_t bytes = 0;
};

struct MemoryPlan {
  uint64_t budget = 0;
  bool vision_on_gpu = false;
  int64_t layers = 0, gpu_layers = 0;  // decoder layers [0, gpu_layers) on the GPU
  bool head_on_gpu = false;            // the final norm, the output head and the embedding table
  // Pool bytes of the output head's bounds copy (Backend::prepare_head_pick): planned where everything is on the GPU
  // and the context still fits beside it; 0: none (decode then reads the head itself).
  uint64_t head_bounds = 0;
  int64_t context = 0;                 // tokens the plan was made for
  int64_t context_room = 0;            // tokens the GPU's layers have room for within the budget (>= context)
  int64_t prefill_chunk = 0;           // prompt tokens per forward pass
  int64_t image_room = 0;              // merged tokens all a request's images may take in one vision pass (>= the
                                       // largest image's), up to context_room
  uint64_t gpu_peak = 0;               // the largest the pool is expected to hold
  // The vision phase's peak for a pass over t merged tokens is vision_pass_base + t · vision_pass_per_token (the
  // weights, buffers and slack, then the activations, which grow with the tokens); 0 where the tower is on the CPU.
  uint64_t vision_pass_base = 0, vision_pass_per_token = 0;
  // The decoder phase's peak less its KV cache, with t merged tokens of image features alive: prefill_base + t ·
  // image_features_per_token.
  uint64_t prefill_base = 0, image_features_per_token = 0;
  std::vector<PlannedPart> parts;      // weights and KV cache per device, then the GPU's activations

  bool everything_on_gpu() const { return vision_on_gpu && head_on_gpu && gpu_layers == layers; }
  // Pool bytes the budget leaves for KV caches beside a vision pass over `tokens` merged tokens (the plan counts the
  // pass where the KV room is, at another moment), and beside a prefill pass with `tokens` of image features alive:
  // what the caches of a request and of the conversations kept from earlier ones may hold then (pool bytes, as
  // kv_cache_pool_bytes counts a cache).
  uint64_t room_beside_vision_pass(int64_t tokens) const;
  uint64_t room_beside_prefill(int64_t image_tokens) const;
  bool decoder_split() const { return gpu_layers < layers || !head_on_gpu; }
  // The bounds copy left out after all (the backend made none): its part (the GPU's, or the CPU's where the head is
  // there) and its bytes in the peak go, the room planned beside it stays.
  void drop_head_bounds();
  std::string summary() const;  // one line: "everything on the GPU", "vision tower on the CPU, ...", ...
  std::string table() const;    // the parts, one a line, MiB and device
};

// Throws qvl::Error when not even the first decoder layer fits, naming the budget, the smallest plan's bytes and
// what everything on the GPU would take.
MemoryPlan plan_memory(const ModelConfig& config, const MemoryPlanRequest& request);

// Bytes a KV cache of type `cache` takes per token of context for `layers` decoder layers.
uint64_t kv_bytes_per_token(const TextConfig& text, int64_t layers, DType cache);
// The pool bytes of that cache for `tokens` tokens: each layer's K and V is its own block, placed as the pool places
// blocks (shared 20 MiB segments under 10 MiB, the rest rounded to 2 MiB).
uint64_t kv_cache_pool_bytes(const TextConfig& text, int64_t layers, int64_t tokens, DType cache);

}  // namespace qvl
