#include "backend/backend.h"

#include "core/error.h"

namespace qvl {

void check_patchify(const Tensor& image, const PatchLayout& p, const Tensor& out) {
  if (image.dtype() != DType::U8 || image.rank() != 3 || image.dim(2) != 3) fail("patchify: the image must be [H, W, 3] u8");
  const int64_t h = image.dim(0), w = image.dim(1), ps = p.patch, m = p.merge;
  const int64_t gh = h / ps, gw = w / ps;
  if (ps <= 0 || m <= 0 || p.temporal <= 0 || gh * ps != h || gw * ps != w || gh % m || gw % m)
    fail("patchify: a ", w, "x", h, " image does not tile into ", ps, "-pixel patches and ", m, "x", m, " windows");
  if (out.numel() != gh * gw * 3 * p.temporal * ps * ps)
    fail("patchify: ", shape_to_string(out.shape()), " cannot hold the patches of a ", w, "x", h, " image");
}

void AttentionMask::check_block_layout(int64_t queries) const {
  if (block_layout.empty()) return;
  const int64_t side = layout_side, positions = past + queries;
  if (kind != Kind::Causal || past_on_device)
    fail("attention: a block layout goes with a causal mask whose position is on the host");
  if (side <= 0 || int64_t(block_layout.size()) != side * side)
    fail("attention: the block layout has ", block_layout.size(), " entries, not ", side, " x ", side);
  if (side * kSparseBlock < positions)
    fail("attention: the block layout covers ", side * kSparseBlock, " positions, the queries reach ", positions);
  for (int64_t b = 0; b < side; ++b)
    if (!block_layout[std::size_t(b * side + b)]) fail("attention: block ", b, " of the layout does not see itself");
}

LinearWeights Backend::upload_linear(const Tensor& weight, const Tensor* bias) {
  Tensor w = upload(weight, WeightRole::Matrix);
  Tensor b = bias ? upload(*bias, WeightRole::Vector) : Tensor();
  return LinearWeights::of(std::move(w), std::move(b));
}

void qk_norm_rope_append_unfused(Backend& be, const HeadNormRopeAppend& op) {
  be.rms_norm(*op.q, *op.q_norm, op.eps, *op.q);
  be.rms_norm(*op.k, *op.k_norm, op.eps, *op.k);
  be.rope(*op.q, *op.cos, *op.sin);
  be.rope(*op.k, *op.cos, *op.sin);
  if (op.row_on_device) {
    be.copy_rows_at(*op.k, *op.cache_k, *op.row_on_device);
    be.copy_rows_at(*op.v, *op.cache_v, *op.row_on_device);
  } else {
    be.copy_rows(*op.k, *op.cache_k, op.row);
    be.copy_rows(*op.v, *op.cache_v, op.row);
  }
}

}  // namespace qvl
