// One thread per pixel: a 512x160 map is 82k pixels and a few hundred blocks, a few microseconds once a step. Each
// pixel finds its block by binary search over its segment's offsets (the CPU reference walks the row instead), so
// the two are independent ways to the same codes.
#include "common.cuh"
#include "pool_map.cuh"

namespace qvl::cuda {
namespace {

constexpr uint8_t kNothing = 0, kEdge = 0x80;

// The last block of [first, last] whose offset is <= byte (the first when none is).
__device__ int block_at(const int64_t* offsets, int first, int last, int64_t byte) {
  int lo = first, hi = last;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= byte) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__global__ void pool_map_kernel(PoolMapArgs a) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y;
  if (x >= a.width) return;
  uint8_t code = kNothing;
  if (y < a.bar_height) {
    const int64_t byte = int64_t(x) * a.bar_scale / a.width;
    for (int part = 0; part < a.bar_parts; ++part)
      if (byte < a.bar_ends[part]) {
        code = a.bar_codes[part];
        break;
      }
  } else if (y > a.bar_height && a.segments > 0) {
    const int64_t r = y - a.bar_height - 1;
    const int64_t rows = a.height - a.bar_height - 1;
    const int64_t band = max(int64_t(1), rows / a.segments);
    const int64_t s = r / band;
    const bool gap = band >= 3 && r % band == band - 1;
    if (s < a.segments && !gap) {
      const int64_t size = a.segment_sizes[s];
      const int64_t used_width = max(int64_t(1), int64_t(a.width) * size / a.largest_segment);
      if (x < used_width) {
        const int first = a.segment_first_block[s], last = a.segment_first_block[s + 1] - 1;
        const int block = block_at(a.block_offsets, first, last, int64_t(x) * size / used_width);
        const bool edge = x > 0 && block_at(a.block_offsets, first, last, int64_t(x - 1) * size / used_width) != block;
        code = a.block_codes[block] | (edge ? kEdge : 0);
      }
    }
  }
  a.out[int64_t(y) * a.width + x] = code;
}

}  // namespace

void draw_pool_map(const PoolMapArgs& args, cudaStream_t stream) {
  if (args.width <= 0 || args.height <= 0) return;
  const dim3 block(128), grid((args.width + 127) / 128, args.height);
  pool_map_kernel<<<grid, block, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace qvl::cuda
