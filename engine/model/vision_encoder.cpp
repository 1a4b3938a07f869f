#include "model/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace qvl {

namespace {

Tensor merger_forward(Backend& be, const MergerWeights& w, const Tensor& x, int64_t merged_rows, int64_t merged_dim,
                      bool norm_before_merge) {
  Tensor normed = be.alloc(x.shape());
  Tensor merged;
  if (norm_before_merge) {  // main merger: per patch, then 4 patches side by side
    be.layer_norm(x, w.norm.weight, w.norm.bias, 1e-6f, normed);
    merged = normed.reshaped({merged_rows, merged_dim});
  } else {                  // deepstack: 4 patches side by side, then one norm over all of them
    const Tensor grouped = x.reshaped({merged_rows, merged_dim});
    normed = be.alloc({merged_rows, merged_dim});
    be.layer_norm(grouped, w.norm.weight, w.norm.bias, 1e-6f, normed);
    merged = normed;
  }
  Tensor hidden = be.alloc({merged_rows, w.fc1.weight.dim(0)});
  be.linear(merged, w.fc1.weight, w.fc1.bias_or_null(), hidden);
  be.gelu(hidden, GeluKind::Erf, hidden);
  Tensor out = be.alloc({merged_rows, w.fc2.weight.dim(0)});
  be.linear(hidden, w.fc2.weight, w.fc2.bias_or_null(), out);
  return out;
}

}  // namespace

VisionOutput encode_images(Backend& be, const ModelConfig& config, const VisionWeights& w, const Tensor& pixel_values,
                           const std::vector<ImageGrid>& grids, const Fusions& fusions) {
  const VisionConfig& c = config.vision;
  int64_t n = 0;
  std::vector<int64_t> bounds{0};  // one attention block per image and frame
  for (const auto& g : grids)
    for (int64_t f = 0; f < g.t; ++f) bounds.push_back(n += g.h * g.w);
  if (pixel_values.dim(0) != n || pixel_values.dim(1) != c.patch_dim())
    fail("vision: pixel_values ", shape_to_string(pixel_values.shape()), " do not match the image grids (", n, " patches of ",
         c.patch_dim(), ")");
  const int64_t hidden = c.hidden_size, heads = c.num_heads, head_dim = c.head_dim();

  Tensor x = be.alloc({n, hidden});
  be.linear(pixel_values, w.patch_embed.weight, w.patch_embed.bias_or_null(), x);
  be.add(x, be.from_host(interpolated_position_embedding(c, w.position_table, grids)), x);
  const auto [cos_host, sin_host] = vision_rope_tables(c, grids);
  const Tensor cos = be.from_host(cos_host), sin = be.from_host(sin_host);
  const AttentionMask mask = AttentionMask::segments(bounds);

  VisionOutput out;
  const int64_t merged_rows = n / (c.spatial_merge_size * c.spatial_merge_size);
  // a (the LayerNorms' output) feeds only the q, k, v and fc1 products: fused, the norms write their operand.
  Tensor a = fusions.layer_norm_linear ? be.alloc_matmul_input({n, hidden}, w.blocks.front().q.weight.dtype())
                                       : be.alloc({n, hidden}),
         q = be.alloc({n, heads, head_dim}), k = be.alloc({n, heads, head_dim}),
         v = be.alloc({n, heads, head_dim}), attn = be.alloc({n, heads, head_dim}), proj = be.alloc({n, hidden}),
         mlp = be.alloc({n, c.intermediate_size});
  // A projection whose output is added to the residual stream, then the LayerNorm that reads the sum: one fused pass
  // (bias included), or the Backend's unfused sequence.
  auto project_add_norm = [&](const Tensor& in, const LinearWeights& lin, const NormWeights& norm) {
    if (fusions.add_layer_norm) {
      be.linear_add_layer_norm(in, lin.weight, lin.bias_or_null(), proj, x, norm.weight, norm.bias, 1e-6f, a);
    } else {
      be.linear(in, lin.weight, lin.bias_or_null(), proj);
      be.Backend::add_layer_norm(x, proj, norm.weight, norm.bias, 1e-6f, a);
    }
  };
  be.layer_norm(x, w.blocks.front().norm1.weight, w.blocks.front().norm1.bias, 1e-6f, a);
  for (int64_t b = 0; b < c.depth; ++b) {
    const VisionBlockWeights& blk = w.blocks[std::size_t(b)];
    // a holds this block's normed input (made by the previous block's closing add + norm).
    be.linear(a, blk.q.weight, blk.q.bias_or_null(), q);
    be.linear(a, blk.k.weight, blk.k.bias_or_null(), k);
    be.linear(a, blk.v.weight, blk.v.bias_or_null(), v);
    be.rope(q, cos, sin);
    be.rope(k, cos, sin);
    if (fusions.flash_attention) be.attention(q, k, v, n, mask, 1.0f / std::sqrt(float(head_dim)), attn);
    else be.attention_unfused(q, k, v, n, mask, 1.0f / std::sqrt(float(head_dim)), attn);
    project_add_norm(attn.reshaped({n, hidden}), blk.proj, blk.norm2);
    if (fusions.linear_gelu) be.linear_gelu(a, blk.fc1.weight, blk.fc1.bias_or_null(), GeluKind::Tanh, mlp);
    else be.Backend::linear_gelu(a, blk.fc1.weight, blk.fc1.bias_or_null(), GeluKind::Tanh, mlp);
    if (b + 1 < c.depth) {
      project_add_norm(mlp, blk.fc2, w.blocks[std::size_t(b + 1)].norm1);  // the mergers read x, not a
    } else {
      be.linear(mlp, blk.fc2.weight, blk.fc2.bias_or_null(), proj);
      be.add(x, proj, x);
    }
    const auto& ds = c.deepstack_visual_indexes;
    // Features are listed in block order (they feed decoder layers 0, 1, ...); each block uses the merger at its
    // position in deepstack_visual_indexes, as transformers does.
    if (const auto it = std::find(ds.begin(), ds.end(), b); it != ds.end())
      out.deepstack.push_back(merger_forward(be, w.deepstack[std::size_t(it - ds.begin())], x, merged_rows, c.merged_dim(), false));
  }
  out.embeddings = merger_forward(be, w.merger, x, merged_rows, c.merged_dim(), true);
  return out;
}

}  // namespace qvl
