// A permute with normalisation. Output rows are written with 16-byte stores, fully coalesced (4 consecutive x of a
// patch row per thread); reads gather 4 pixels x 3 bytes from a 0.6 MB image (448 x 448) that stays in L2 after its
// first touch, so a shared-memory transpose tile would buy nothing here: the kernel is bound by its 4.8 MB of writes
// (the bandwidth bound: ~1.6 us at an H100's 3 TB/s, ~43 us at a GTX 1050's 112 GB/s; not timed separately).
#include <algorithm>

#include "common.cuh"
#include "patchify.cuh"

namespace qvl::cuda {
namespace {

__global__ void patchify_kernel(const uint8_t* __restrict__ image, PatchParams p, float4* __restrict__ out,
                                int64_t quads) {
  const int64_t gw = p.width / p.patch, ps = p.patch, tp = p.temporal, m = p.merge;
  const int64_t quads_per_row = 3 * tp * ps * ps / 4;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = q / quads_per_row, in_row = q % quads_per_row * 4;
    // Column layout (c, t, y, x); row order (window row, window col, i, j).
    const int64_t x = in_row % ps, y = in_row / ps % ps, c = in_row / (ps * ps * tp);
    const int64_t window = row / (m * m), i = row % (m * m) / m, j = row % m;
    const int64_t py = window / (gw / m) * m + i, px = window % (gw / m) * m + j;
    const uint8_t* src = image + ((py * ps + y) * p.width + px * ps + x) * 3 + c;
    const float mean = p.mean[c], sd = p.std[c];  // divided, not multiplied by 1/std: the host's rounding exactly
    out[q] = make_float4((float(src[0]) - mean) / sd, (float(src[3]) - mean) / sd, (float(src[6]) - mean) / sd,
                         (float(src[9]) - mean) / sd);
  }
}

}  // namespace

void patchify(const uint8_t* image, const PatchParams& p, float* out, cudaStream_t stream) {
  if (p.patch % 4 != 0) throw std::runtime_error("patchify: the patch size must be a multiple of 4");
  const int64_t quads = (p.height / p.patch) * (p.width / p.patch) * 3 * p.temporal * p.patch * p.patch / 4;
  if (quads == 0) return;
  const auto blocks = unsigned(std::min<int64_t>((quads + 255) / 256, 4096));
  patchify_kernel<<<blocks, 256, 0, stream>>>(image, p, reinterpret_cast<float4*>(out), quads);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
