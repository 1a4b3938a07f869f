#pragma once
// Which fused ops the model asks the backend for. Each fusion has its unfused sequence as the reference (the
// Backend's default implementation), so every switch here can be flipped at run time and compared.
#include <string>
#include <vector>

namespace qvl {

struct Fusions {
  bool add_rms_norm = true;         // the residual add and the RMSNorm after it, one pass over the row
  bool qkv_projection = true;       // the q, k and v projections in one pass over the three matrices (decode)
  bool qk_norm_rope_append = true;  // q/k head norms, RoPE and the KV-cache append, one launch
  bool swiglu_projection = true;    // gate and up projections with SiLU ⊙ up, one pass over both matrices (decode)
  bool add_layer_norm = true;       // vision: the residual add (with the residual's bias) and the LayerNorm after it
  bool linear_gelu = true;          // vision: the MLP's bias and GELU after its first matrix product, one pass
  bool flash_attention = true;      // scores, softmax and weighted sum in one kernel, the scores never in memory
  // The input RMSNorm folded into the projections that read it. Decode rows (where the backend folds, the GPU): the
  // norm runs inside the q+k+v and gate/up GEMVs and the residual add inside the o and down GEMVs; those
  // projections are then fused as above whatever qkv_projection and swiglu_projection say. Prefill rows: the norm
  // writes the GEMMs' 16-bit operand (Backend::alloc_matmul_input), so no product converts its input itself.
  bool norm_into_projection = true;
  bool layer_norm_linear = true;  // vision: the LayerNorm writes the q, k, v and fc1 GEMMs' 16-bit operand the same way

  static Fusions none() { return {false, false, false, false, false, false, false, false, false}; }
  bool operator==(const Fusions&) const = default;
  // Names of the fusions that are on ("add+rms_norm"), for reports.
  std::vector<std::string> enabled() const {
    std::vector<std::string> names;
    if (add_rms_norm) names.push_back("add+rms_norm");
    if (qkv_projection) names.push_back("linear q+k+v");
    if (qk_norm_rope_append) names.push_back("qk_norm+rope+append");
    if (swiglu_projection) names.push_back("linear+swiglu");
    if (add_layer_norm) names.push_back("add+layer_norm");
    if (linear_gelu) names.push_back("bias+gelu");
    if (flash_attention) names.push_back("flash attention");
    if (norm_into_projection) names.push_back("rms_norm+linear");
    if (layer_norm_linear) names.push_back("layer_norm+linear");
    return names;
  }
};

}  // namespace qvl
