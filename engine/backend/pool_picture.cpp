#include "backend/pool_picture.h"

#include <algorithm>

#include "core/error.h"

namespace qvl {

PoolCode pool_code_of_owner(const std::string& owner) {
  if (owner == "weights") return kPoolWeights;
  if (owner == "kv cache") return kPoolKvCache;
  if (owner == "activations") return kPoolActivations;
  if (owner == "workspace") return kPoolWorkspace;
  return kPoolOtherOwner;
}

void check_pool_map_geometry(const PoolMapGeometry& g) {
  constexpr int kMaxSide = 4096;
  if (g.width < 1 || g.width > kMaxSide || g.bar_height < 0 || g.height < g.bar_height + 2 || g.height > kMaxSide)
    fail("pool map: " + std::to_string(g.width) + "x" + std::to_string(g.height) + " with a " +
         std::to_string(g.bar_height) + "-row bar is outside 1..4096 wide and bar+2..4096 high");
}

namespace {

// The bar: owners in a fixed order (so colours stay put from step to step), then the cached free bytes.
void fill_bar(const MemoryReport& report, PoolMapTable& t) {
  int64_t by_code[kPoolCodeCount] = {};
  for (const auto& [owner, bytes] : report.by_owner) by_code[pool_code_of_owner(owner)] += std::max<int64_t>(bytes, 0);
  int64_t end = 0;
  for (uint8_t code : {kPoolWeights, kPoolKvCache, kPoolActivations, kPoolWorkspace, kPoolOtherOwner}) {
    if (by_code[code] == 0) continue;
    end += by_code[code];
    t.bar_ends.push_back(end);
    t.bar_codes.push_back(code);
  }
  const int64_t cached_free = report.reserved - report.allocated;
  if (cached_free > 0) {
    end += cached_free;
    t.bar_ends.push_back(end);
    t.bar_codes.push_back(kPoolFree);
  }
  t.bar_scale = std::max<int64_t>({1, end, report.capacity});
}

}  // namespace

PoolMapTable pool_map_table(const MemoryReport& report) {
  PoolMapTable t;
  fill_bar(report, t);

  for (const auto& segment : report.segment_map) {
    if (segment.size <= 0 || segment.blocks.empty()) continue;
    t.segment_sizes.push_back(segment.size);
    t.segment_first_block.push_back(static_cast<int32_t>(t.block_offsets.size()));
    t.largest_segment = std::max(t.largest_segment, segment.size);
    for (const auto& block : segment.blocks) {
      t.block_offsets.push_back(block.offset);
      t.block_codes.push_back(block.allocated ? pool_code_of_owner(block.owner) : kPoolFree);
    }
  }
  t.segment_first_block.push_back(static_cast<int32_t>(t.block_offsets.size()));
  return t;
}

int pool_map_capacity_column(const MemoryReport& report, const PoolMapGeometry& geometry) {
  if (report.capacity <= 0) return -1;
  PoolMapTable bar;  // the bar alone: the segment map is not walked
  fill_bar(report, bar);
  const int64_t scale = bar.bar_scale;
  return static_cast<int>(std::min<int64_t>(geometry.width - 1, report.capacity * geometry.width / scale));
}

std::vector<uint8_t> draw_pool_map(const PoolMapTable& t, const PoolMapGeometry& g) {
  check_pool_map_geometry(g);
  const int64_t width = g.width;
  std::vector<uint8_t> codes(static_cast<size_t>(width) * g.height, kPoolNothing);
  // The bar: the byte under each column, then the part that holds it.
  for (int64_t x = 0; x < width; ++x) {
    const int64_t byte = x * t.bar_scale / width;
    uint8_t code = kPoolNothing;
    for (size_t part = 0; part < t.bar_ends.size(); ++part)
      if (byte < t.bar_ends[part]) {
        code = t.bar_codes[part];
        break;
      }
    for (int y = 0; y < g.bar_height; ++y) codes[y * width + x] = code;
  }
  // The segments: equal bands below the bar's empty row (a band of 3 rows or more leaves its last row empty).
  const int64_t segments = static_cast<int64_t>(t.segment_sizes.size());
  const int64_t rows = g.height - g.bar_height - 1;
  if (segments == 0) return codes;
  const int64_t band = std::max<int64_t>(1, rows / segments);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = r / band;
    if (s >= segments || (band >= 3 && r % band == band - 1)) continue;
    const int64_t size = t.segment_sizes[s];
    const int64_t used_width = std::max<int64_t>(1, width * size / t.largest_segment);
    uint8_t* row = &codes[(g.bar_height + 1 + r) * width];
    int64_t block = t.segment_first_block[s];
    const int64_t last_block = t.segment_first_block[s + 1] - 1;
    for (int64_t x = 0; x < used_width; ++x) {
      const int64_t byte = x * size / used_width;
      const int64_t before = block;
      while (block < last_block && t.block_offsets[block + 1] <= byte) ++block;
      row[x] = t.block_codes[block] | ((x > 0 && block != before) ? kPoolEdge : 0);
    }
  }
  return codes;
}

}  // namespace qvl
