#include "model/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "core/cancel.h"
#include "core/error.h"

namespace qvl {

namespace {

constexpr float kEps = 1e-6f;

// The main merger normalises each patch, then projects 4 patches side by side; a DeepStack merger normalises the 4
// patches together. Either way one LayerNorm prologue: over groups of its weight's width within the merged row.
Tensor merger_forward(Backend& be, const MergerWeights& w, const Tensor& x, int64_t merged_rows, int64_t merged_dim) {
  const Tensor grouped = x.reshaped({merged_rows, merged_dim});
  Tensor normed, activated, hidden = be.alloc({merged_rows, w.fc1.rows()}), out = be.alloc({merged_rows, w.fc2.rows()});
  be.project(Projection::of(grouped, w.fc1, hidden)
                 .reading_norm(RowNorm::layer(w.norm, kEps), normed)
                 .gelu(GeluKind::Erf)
                 .into_operand(activated));
  be.project(Projection::of(activated, w.fc2, out));
  return out;
}

}  // namespace

VisionOutput encode_images(Backend& be, const ModelConfig& config, const VisionWeights& w, const Tensor& pixel_values,
                           const std::vector<ImageGrid>& grids, const std::atomic<bool>* stop) {
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
  be.project(Projection::of(pixel_values, w.patch_embed, x));
  be.add_blended_rows(x, w.position_table, position_blend(c, grids));
  const auto [cos_host, sin_host] = vision_rope_tables(c, grids);
  const Tensor cos = be.from_host(cos_host), sin = be.from_host(sin_host);
  const AttentionMask mask = AttentionMask::segments(bounds);

  VisionOutput out;
  const int64_t merged_rows = n / (c.spatial_merge_size * c.spatial_merge_size);
  // a is the projections' norm slot (the backend allocates it on first use, in the type its products read).
  // mlp_out is the GELU's output slot, fc2's input (Projection::activated: maybe its 16-bit operand); attn is proj's
  // input, in the type it reads where the attention can write that; k and v in the type the attention reads best.
  Tensor a, mlp_out, q = be.alloc({n, heads, head_dim}), k = be.alloc_keys_values({n, heads, head_dim}),
            v = be.alloc_keys_values({n, heads, head_dim}),
            attn = w.blocks.empty() ? be.alloc({n, heads, head_dim})
                                    : be.alloc_for_product({n, heads, head_dim}, w.blocks[0].proj),
            proj = be.alloc({n, hidden}), mlp = be.alloc({n, c.intermediate_size});
  const auto layer_norm = [](const NormWeights& nw) { return RowNorm::layer(nw, kEps); };
  bool input_normed = false;  // a holds this block's normed input (the previous block's closing norm made it)
  for (int64_t b = 0; b < c.depth; ++b) {
    stop_if_requested(stop);
    const VisionBlockWeights& blk = w.blocks[std::size_t(b)];
    be.project(Projection::of(x, blk.q, blk.k, blk.v, q, k, v)
                   .reading_norm(layer_norm(blk.norm1), a, input_normed)
                   .rotating(cos, sin));
    be.attention(q, k, v, n, mask, 1.0f / std::sqrt(float(head_dim)), attn);
    // Also between a block's ops: a stopped product returns at once, but the ops around it (GELU, adds, norms) run
    // whole; checked only between blocks, a stop took 27-58 ms to end a CPU vision pass of 3 pictures (demo-shapes,
    // this project's 2-core machine), 2-17 ms with these checks (fourteen runs).
    stop_if_requested(stop);
    const Tensor attended = attn.reshaped({n, hidden});
    be.project(Projection::add_to(x, attended, blk.proj, proj).then(layer_norm(blk.norm2), a));
    stop_if_requested(stop);
    be.project(Projection::of(x, blk.fc1, mlp)
                   .reading_norm(layer_norm(blk.norm2), a, true)
                   .gelu(GeluKind::Tanh)
                   .into_operand(mlp_out));
    stop_if_requested(stop);
    // The mergers read x, not a: the last block closes without a norm.
    input_normed = b + 1 < c.depth;
    Projection fc2 = Projection::add_to(x, mlp_out, blk.fc2, proj);
    if (input_normed) fc2.then(layer_norm(w.blocks[std::size_t(b + 1)].norm1), a);
    be.project(fc2);
    const auto& ds = c.deepstack_visual_indexes;
    // Features are listed in block order (they feed decoder layers 0, 1, ...); each block uses the merger at its
    // position in deepstack_visual_indexes, as transformers does.
    if (const auto it = std::find(ds.begin(), ds.end(), b); it != ds.end())
      out.deepstack.push_back(merger_forward(be, w.deepstack[std::size_t(it - ds.begin())], x, merged_rows, c.merged_dim()));
  }
  out.embeddings = merger_forward(be, w.merger, x, merged_rows, c.merged_dim());
  stop_if_requested(stop);
  return out;
}

}  // namespace qvl
