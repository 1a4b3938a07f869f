#pragma once
// The per-kernel table of the answer in progress (ranked by total time: calls, mean µs, GB/s, share) and a strip
// chart of the time each token took.
#include <QAbstractTableModel>
#include <QElapsedTimer>
#include <QTimer>
#include <QWidget>
#include <deque>

#include "runtime/profiler.h"
#include "ui/engine_types.h"

class QLabel;
class QTableView;

namespace qvl::ui {

class KernelTableModel : public QAbstractTableModel {
  Q_OBJECT
public:
  using QAbstractTableModel::QAbstractTableModel;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
  void set_kernels(std::vector<KernelSummary> kernels);
  // The same kernels in the same order as shown (an update in place, not new rows).
  bool same_rows(const std::vector<KernelSummary>& kernels) const;
  const std::vector<KernelSummary>& kernels() const { return kernels_; }

private:
  std::vector<KernelSummary> kernels_;
};

// Data (the last kMaxSteps step times) apart from drawing (paintEvent).
class StepChart : public QWidget {
  Q_OBJECT
public:
  static constexpr std::size_t kMaxSteps = 300;
  explicit StepChart(QWidget* parent = nullptr);
  void add(const std::vector<double>& step_ms);
  void clear();
  QSize sizeHint() const override { return {360, 110}; }

protected:
  void paintEvent(QPaintEvent* event) override;

private:
  std::deque<double> steps_;
};

class KernelView : public QWidget {
  Q_OBJECT
public:
  explicit KernelView(QWidget* parent = nullptr);
  void update_from(const PerfSnapshot& s);
  void set_timing_enabled(bool on);  // off: the table says how to turn it on
  const KernelTableModel& table() const { return *model_; }

private:
  KernelTableModel* model_;
  QTableView* view_;
  StepChart* chart_;
  QLabel* note_;
  quint64 request_ = 0;
  // The table's numbers change at most every kKernelTableIntervalMs while tokens stream (at 30 changes a second the
  // table was 4 of 24 gdb samples of the GUI thread); new rows and an answer's last snapshot show at once.
  QElapsedTimer table_shown_;
  QTimer table_timer_;
  std::vector<KernelSummary> pending_;
};

}  // namespace qvl::ui
