#pragma once
// Which fused kernels a backend may use (Backend::set_fusions). Each fusion has its unfused sequence as the
// reference (project_unfused, qk_norm_rope_append_unfused, the unfused attention), so every switch here can be
// flipped at run time and compared. A backend without a fused kernel for a switch runs the reference either way.
#include <array>
#include <string>
#include <utility>
#include <vector>

namespace qvl {

struct Fusions {
  bool add_rms_norm = true;         // the residual add and the RMSNorm after it, one pass over the row
  bool qkv_projection = true;       // the q, k and v projections in one pass over the three matrices (CUDA: decode)
  bool qk_norm_rope_append = true;  // q/k head norms, RoPE and the KV-cache append, one launch
  // Gate and up projections with SiLU ⊙ up, one pass over both matrices (CUDA: decode); on CUDA's cuBLAS rows, the
  // SiLU ⊙ up also writes the down product's 16-bit operand (Projection::into_operand).
  bool swiglu_projection = true;
  bool add_layer_norm = true;       // vision: the residual add (with the residual's bias) and the LayerNorm after it
  // Vision: the MLP's bias and GELU after its first matrix product, one pass, writing the second product's 16-bit
  // operand on CUDA's cuBLAS rows (Projection::into_operand).
  bool linear_gelu = true;
  bool flash_attention = true;      // scores, softmax and weighted sum in one kernel, the scores never in memory
  // The input RMSNorm folded into the projections that read it. Decode rows (where the backend folds, the GPU): the
  // norm runs inside the q+k+v and gate/up GEMVs and the residual add inside the o and down GEMVs; those
  // projections are then fused as above whatever qkv_projection and swiglu_projection say. Prefill rows: the norm
  // writes the GEMMs' 16-bit operand (the projection's norm slot, Backend::alloc_normed), so no product converts its
  // input itself.
  bool norm_into_projection = true;
  bool layer_norm_linear = true;  // vision: the LayerNorm writes the q, k, v and fc1 GEMMs' 16-bit operand the same way
  // The pick on the device from a bounds copy of the output head (Backend::project_then_pick, project_then_top_k):
  // only the rows whose logit may be picked, or be one of top-k's candidates, are computed from the head itself. The
  // same pick and candidates; logits are not all computed, so it runs where a step hands back a pick only (CUDA,
  // where the memory plan has room for the copy; the CPU, where the host has).
  bool bounded_head_pick = true;

  static Fusions none() { return {false, false, false, false, false, false, false, false, false, false}; }
  bool operator==(const Fusions&) const = default;
  // Every switch with its name in reports, in declaration order.
  static constexpr std::array<std::pair<const char*, bool Fusions::*>, 10> kSwitches{{
      {"add+rms_norm", &Fusions::add_rms_norm},
      {"linear q+k+v", &Fusions::qkv_projection},
      {"qk_norm+rope+append", &Fusions::qk_norm_rope_append},
      {"linear+swiglu", &Fusions::swiglu_projection},
      {"add+layer_norm", &Fusions::add_layer_norm},
      {"bias+gelu", &Fusions::linear_gelu},
      {"flash attention", &Fusions::flash_attention},
      {"rms_norm+linear", &Fusions::norm_into_projection},
      {"layer_norm+linear", &Fusions::layer_norm_linear},
      {"head bounds+pick", &Fusions::bounded_head_pick},
  }};
  // Names of the fusions that are on ("add+rms_norm"), for reports.
  std::vector<std::string> enabled() const {
    std::vector<std::string> names;
    for (const auto& [name, on] : kSwitches)
      if (this->*on) names.push_back(name);
    return names;
  }
};

}  // namespace qvl
