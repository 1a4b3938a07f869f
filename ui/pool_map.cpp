#include "ui/pool_map.h"

#include <algorithm>

namespace qvl::ui {

std::vector<PoolCell> layout_block_map(const MemoryReport& report, const QSizeF& area) {
  std::vector<PoolCell> cells;
  const auto& segments = report.segment_map;
  if (segments.empty() || area.isEmpty()) return cells;
  int64_t largest = 1;
  for (const auto& s : segments) largest = std::max(largest, s.size);
  const double row = area.height() / double(segments.size());
  const double gap = row >= 6 ? 1.0 : 0.0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& seg = segments[i];
    const double width = area.width() * double(seg.size) / double(largest);
    for (const auto& b : seg.blocks) {
      const double x = width * double(b.offset) / double(std::max<int64_t>(1, seg.size));
      const double w = std::max(1.0, width * double(b.size) / double(std::max<int64_t>(1, seg.size)));
      cells.push_back({QRectF(x, double(i) * row, w, std::max(1.0, row - gap)), int(i), b.offset, b.size, b.allocated,
                       QString::fromStdString(b.owner)});
    }
  }
  return cells;
}

std::vector<OwnerShare> owner_shares(const MemoryReport& report) {
  std::vector<OwnerShare> out;
  for (const auto& [owner, bytes] : report.by_owner) out.push_back({QString::fromStdString(owner), bytes});
  out.push_back({"cached free", std::max<int64_t>(0, report.reserved - report.allocated)});
  return out;
}

QColor owner_color(const QString& owner) {
  if (owner == "weights") return {66, 133, 244};
  if (owner == "kv cache") return {52, 168, 83};
  if (owner == "activations") return {251, 188, 5};
  if (owner == "workspace") return {234, 67, 53};
  if (owner == "cached free") return {200, 200, 200};
  return {150, 120, 200};
}

}  // namespace qvl::ui
