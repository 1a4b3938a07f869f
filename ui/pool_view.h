#pragma once
// The device memory pool, live: occupancy by owner with current and peak, the block map of segments and blocks,
// and a capacity slider that makes the GPU behave like a smaller card (the model reloads under the new cap).
#include <QWidget>

#include "backend/backend.h"
#include "runtime/conversation_cache.h"
#include "runtime/vision_cache.h"

class QLabel;
class QSlider;

namespace qvl::ui {

class OwnerBar : public QWidget {
  Q_OBJECT
public:
  using QWidget::QWidget;
  void set_report(const MemoryReport& r);
  QSize sizeHint() const override { return {360, 54}; }

protected:
  void paintEvent(QPaintEvent* event) override;

private:
  MemoryReport report_;
};

class BlockMap : public QWidget {
  Q_OBJECT
public:
  using QWidget::QWidget;
  void set_report(const MemoryReport& r);
  QSize sizeHint() const override { return {360, 160}; }

protected:
  void paintEvent(QPaintEvent* event) override;

private:
  MemoryReport report_;
};

class PoolView : public QWidget {
  Q_OBJECT
public:
  explicit PoolView(QWidget* parent = nullptr);
  // device_memory: the backend the model runs on has a pool of its own (the slider caps it).
  void update_from(const MemoryReport& r, bool device_memory);
  // The memory plan the model was placed by (bytes per part per device); empty hides it.
  void set_plan(const QString& plan);
  // Why no GPU can be chosen (empty: one can), said instead of "switch to the GPU" while the model is on the CPU.
  void set_gpu_unavailable(const QString& reason);
  // The block map drawn by Vulkan (`map`, a window container) instead of QPainter, with where its pixels come from.
  void set_vulkan_map(QWidget* map, const QString& source);
  // QPainter draws the block map, and why Vulkan does not.
  void use_painter(const QString& reason);
  // While the model is on the CPU (no pool): what matters there, in one line (MainWindow::cpu_resources).
  void show_cpu_resources(const QString& text);
  // What the engine keeps between answers (chats' keys and values in the pool or RAM, pictures' features in RAM).
  void set_kept(const ConversationCacheStats& conversations, const VisionCacheStats& pictures);
  QString cpu_resources() const;

signals:
  void capacityChosen(qint64 mib);  // 0: no limit

private:
  QLabel* cpu_;
  QLabel* kept_;
  QLabel* summary_;
  QLabel* plan_;
  OwnerBar* bar_;
  BlockMap* map_;
  QWidget* vulkan_map_ = nullptr;
  QLabel* source_;
  QSlider* capacity_;
  QLabel* capacity_label_;
  QLabel* capacity_title_;
  QString gpu_unavailable_;
};

}  // namespace qvl::ui
