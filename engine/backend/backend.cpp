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

}  // namespace qvl
