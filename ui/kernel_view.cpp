#include "ui/kernel_view.h"

#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>

namespace qvl::ui {

namespace {
enum Column { Name, Calls, Mean, Total, GBs, Share, Count };
}

int KernelTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(kernels_.size()); }
int KernelTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : Count; }

QVariant KernelTableModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"Kernel", "Calls", "Mean µs", "Total ms", "GB/s", "Share"};
  return names[section];
}

QVariant KernelTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const KernelSummary& k = kernels_[std::size_t(index.row())];
  if (role == Qt::TextAlignmentRole && index.column() != Name) return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole)
    return QString("%1\np50 %2 µs, p95 %3 µs, %4 TFLOP/s").arg(QString::fromStdString(k.name)).arg(k.p50_us, 0, 'f', 1)
        .arg(k.p95_us, 0, 'f', 1).arg(k.tflop_per_s, 0, 'f', 3);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Name: return QString::fromStdString(k.name);
    case Calls: return qlonglong(k.calls);
    case Mean: return QString::number(k.mean_us, 'f', 1);
    case Total: return QString::number(k.total_ms, 'f', 2);
    case GBs: return QString::number(k.gb_per_s, 'f', 1);
    case Share: return QString("%1%").arg(100 * k.share, 0, 'f', 1);
    default: return {};
  }
}

void KernelTableModel::set_kernels(std::vector<KernelSummary> kernels) {
  // Same rows in the same order (the common case while tokens stream): update in place so the view keeps its
  // selection and scroll position.
  if (same_rows(kernels)) {
    kernels_ = std::move(kernels);
    if (!kernels_.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, Count - 1));
    return;
  }
  beginResetModel();
  kernels_ = std::move(kernels);
  endResetModel();
}

bool KernelTableModel::same_rows(const std::vector<KernelSummary>& kernels) const {
  return kernels.size() == kernels_.size() &&
         std::equal(kernels.begin(), kernels.end(), kernels_.begin(), [](const auto& a, const auto& b) { return a.name == b.name; });
}

StepChart::StepChart(QWidget* parent) : QWidget(parent) { setMinimumHeight(80); }

void StepChart::add(const std::vector<double>& step_ms) {
  for (double ms : step_ms) {
    steps_.push_back(ms);
    if (steps_.size() > kMaxSteps) steps_.pop_front();
  }
  update();
}

void StepChart::clear() {
  steps_.clear();
  update();
}

void StepChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  p.setPen(palette().color(QPalette::Mid));
  p.drawRect(rect().adjusted(0, 0, -1, -1));
  const QRect plot = rect().adjusted(44, 8, -8, -18);
  p.setPen(palette().color(QPalette::Text));
  if (steps_.empty()) {
    p.drawText(rect(), Qt::AlignCenter, "time per token (ms) appears here while the model answers");
    return;
  }
  std::vector<double> sorted(steps_.begin(), steps_.end());
  std::sort(sorted.begin(), sorted.end());
  const double top = std::max(1e-3, sorted[std::min(sorted.size() - 1, sorted.size() * 98 / 100)] * 1.15);
  const double median = sorted[sorted.size() / 2];
  p.drawText(QRect(0, plot.top() - 6, 40, 14), Qt::AlignRight, QString::number(top, 'g', 3));
  p.drawText(QRect(0, plot.bottom() - 6, 40, 14), Qt::AlignRight, "0");
  p.drawText(QRect(plot.left(), plot.bottom() + 2, plot.width(), 16), Qt::AlignLeft,
             QString("ms per token, last %1 tokens · median %2 ms").arg(steps_.size()).arg(median, 0, 'f', 2));
  // The tokens so far span the width (a 15-token answer was a sliver of a 300-token axis); past kMaxSteps it rolls.
  QPolygonF line;
  const double dx = plot.width() / double(std::max<std::size_t>(1, steps_.size() - 1));
  for (std::size_t i = 0; i < steps_.size(); ++i)
    line << QPointF(plot.left() + double(i) * dx, plot.bottom() - std::min(1.0, steps_[i] / top) * plot.height());
  // A cosmetic one-pixel pen takes the raster engine's fast stroker at any device-pixel ratio; the 1.5-pixel one was
  // stroked into a polygon and filled, ~30% of the GUI thread's samples while a long answer streamed (perf and gdb,
  // this project's machine).
  p.setRenderHint(QPainter::Antialiasing);
  QPen pen(palette().color(QPalette::Highlight), 1.0);
  pen.setCosmetic(true);
  p.setPen(pen);
  p.drawPolyline(line);
}

KernelView::KernelView(QWidget* parent)
    : QWidget(parent), model_(new KernelTableModel(this)), view_(new QTableView), chart_(new StepChart), note_(new QLabel) {
  view_->setModel(model_);
  view_->setObjectName("kernel_table");
  table_timer_.setSingleShot(true);
  connect(&table_timer_, &QTimer::timeout, this, [this] {
    model_->set_kernels(std::move(pending_));
    table_shown_.start();
  });
  view_->verticalHeader()->hide();
  view_->verticalHeader()->setDefaultSectionSize(view_->fontMetrics().height() + 4);
  view_->setWordWrap(false);
  // Names whole (the head's "linear 151936x2048" was cut to "linear 15193…48"): every column as wide as its
  // contents, the last one taking what is left; a narrow dock scrolls sideways instead.
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setStretchLastSection(true);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  note_->setWordWrap(true);
  note_->hide();
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(note_);
  layout->addWidget(view_, 1);
  layout->addWidget(chart_);
}

void KernelView::update_from(const PerfSnapshot& s) {
  if (s.request_id != request_) {
    request_ = s.request_id;
    chart_->clear();
    table_shown_.invalidate();  // the new answer's first numbers at once, whatever its rows
  }
  chart_->add(s.step_ms);
  pending_ = s.kernels;
  if (!model_->same_rows(pending_) || s.final || !table_shown_.isValid() || table_shown_.elapsed() >= kKernelTableIntervalMs) {
    table_timer_.stop();
    model_->set_kernels(std::move(pending_));
    table_shown_.start();
  } else if (!table_timer_.isActive()) {
    table_timer_.start(int(kKernelTableIntervalMs - table_shown_.elapsed()));
  }
}

void KernelView::set_timing_enabled(bool on) {
  note_->setVisible(!on);
  note_->setText("Per-kernel timing is off (View ▸ Time kernels). On a GPU, timing launches each kernel on its own "
                 "instead of replaying the recorded decode step, so answers are a little slower with it on.");
}

}  // namespace qvl::ui
