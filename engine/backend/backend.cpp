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

}  // namespace qvl
