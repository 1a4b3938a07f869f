#pragma once
// The memory pool's pictures as data: the stacked occupancy bar (by owner, plus cached free) and the block map
// (one row per segment, blocks in address order, widths by size). Widgets paint these; another renderer (the
// planned Vulkan view) can draw the same cells.
#include <QColor>
#include <QRectF>
#include <QString>
#include <vector>

#include "backend/backend.h"

namespace qvl::ui {

struct PoolCell {
  QRectF rect;  // in the area passed to the layout
  int segment = 0;
  int64_t offset = 0, size = 0;
  bool allocated = false;
  QString owner;
};

struct OwnerShare {
  QString owner;  // "weights", "kv cache", "activations", "workspace", or "cached free"
  int64_t bytes = 0;
};

// Segments as rows (each as wide as its share of the largest segment), blocks left to right.
std::vector<PoolCell> layout_block_map(const MemoryReport& report, const QSizeF& area);
// Allocated bytes by owner, then what the pool holds but has not handed out.
std::vector<OwnerShare> owner_shares(const MemoryReport& report);
QColor owner_color(const QString& owner);

}  // namespace qvl::ui
