#pragma once
// The memory pool as a picture of one byte per pixel, the same on every path: a CUDA kernel draws it from the
// pool's block table into memory a Vulkan renderer reads (interop), and the host draws it here when the pictures
// travel through a staging upload instead (and as the reference the kernel is tested against). A renderer only
// colours the codes, so every path shows exactly the same pool.
//
// Layout, top to bottom: the occupancy bar (bytes allocated by owner, then what the pool holds but has not handed
// out, left to right, against the larger of the capacity and the reserved bytes), one empty row, then one band of
// rows per segment: as wide as its share of the largest segment, its blocks left to right in address order, the
// first column of each block marked as an edge.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace qvl {

// Pixel codes: the low 7 bits say what the byte under the pixel is; kPoolEdge marks a block's first column.
enum PoolCode : uint8_t {
  kPoolNothing = 0,     // background, gaps, past a segment's end
  kPoolFree = 1,        // a free block, or the bar's reserved-but-not-allocated part
  kPoolWeights = 2,
  kPoolKvCache = 3,
  kPoolActivations = 4,
  kPoolWorkspace = 5,
  kPoolOtherOwner = 6,
  kPoolCodeCount = 7,
  kPoolEdge = 0x80,
};
PoolCode pool_code_of_owner(const std::string& owner);

struct PoolMapGeometry {
  int width = 512;
  int height = 160;
  int bar_height = 12;
};
// Refuses sizes no view needs (and that would overflow the byte arithmetic): 1..4096 wide, bar + 2 ..4096 high.
void check_pool_map_geometry(const PoolMapGeometry& geometry);

// The block table in the compact form the kernel reads: flat arrays, blocks in address order per segment.
struct PoolMapTable {
  int64_t bar_scale = 1;                       // bytes the bar's width stands for (>= 1)
  std::vector<int64_t> bar_ends;               // cumulative bytes where each bar part ends
  std::vector<uint8_t> bar_codes;              // the code of each bar part
  std::vector<int64_t> segment_sizes;          // bytes per segment
  std::vector<int32_t> segment_first_block;    // index of each segment's first block; one more entry at the end
  std::vector<int64_t> block_offsets;          // each block's offset in its segment (ascending, the first is 0)
  std::vector<uint8_t> block_codes;            // kPoolFree or its owner's code
  int64_t largest_segment = 1;
};
// From a memory report with its segment map (memory_report(true)); capacity <= 0 means none.
PoolMapTable pool_map_table(const MemoryReport& report);
// The column of the capacity line in the bar, or -1 when the pool has no capacity (or it is off the bar).
int pool_map_capacity_column(const MemoryReport& report, const PoolMapGeometry& geometry);

// The CPU drawing: width * height codes, row by row.
std::vector<uint8_t> draw_pool_map(const PoolMapTable& table, const PoolMapGeometry& geometry);

}  // namespace qvl
