#include "render/pool_map_channel.h"

#include <algorithm>
#include <cstring>

namespace qvl::render {

bool PoolMapChannel::publish(const MemoryReport& report, DeviceInterop* facet) {
  PoolMapGeometry geometry;
  {
    std::lock_guard lock(geometry_mutex_);
    geometry = geometry_;
  }
  return FrameChannel::publish(facet, [&](const Target& target) {
    if (target.facet) {
      target.facet->draw_pool_map(report, geometry, target.memory, target.offset);
    } else {
      const auto codes = draw_pool_map(pool_map_table(report), geometry);
      std::memcpy(target.host, codes.data(), codes.size());
    }
    return PoolFrameMeta{geometry, pool_map_capacity_column(report, geometry)};
  });
}

void PoolMapChannel::set_geometry(const PoolMapGeometry& g) {
  const PoolMapGeometry clamped{std::clamp(g.width, 1, kMaxWidth), std::clamp(g.height, g.bar_height + 2, kMaxHeight),
                                g.bar_height};
  check_pool_map_geometry(clamped);
  std::lock_guard lock(geometry_mutex_);
  geometry_ = clamped;
}

}  // namespace qvl::render
