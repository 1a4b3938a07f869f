#include "ui/pool_view.h"

#include <initializer_list>

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QSlider>
#include <QVBoxLayout>

#include "ui/pool_map.h"

namespace qvl::ui {

namespace {
constexpr int kStepMib = 256, kSteps = 64;  // the slider: the driver's free memory, or 256 MiB .. 16 GiB
QString mib(int64_t bytes) { return QString("%1 MiB").arg(double(bytes) / (1 << 20), 0, 'f', 1); }
}  // namespace

void OwnerBar::set_report(const MemoryReport& r) {
  report_ = r;
  update();
}

void OwnerBar::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QRect bar(0, 0, width() - 1, 22);
  p.fillRect(bar, palette().color(QPalette::Base));
  if (!report_.available) return;
  const int64_t scale = std::max<int64_t>({1, report_.capacity > 0 ? report_.capacity : 0, report_.reserved_peak});
  double x = 0;
  int legend_x = 0;
  for (const OwnerShare& s : owner_shares(report_)) {
    const double w = bar.width() * double(s.bytes) / double(scale);
    p.fillRect(QRectF(x, 0, w, bar.height()), owner_color(s.owner));
    x += w;
    p.fillRect(legend_x, 30, 10, 10, owner_color(s.owner));
    const QString text = QString("%1 %2").arg(s.owner, mib(s.bytes));
    p.setPen(palette().color(QPalette::Text));
    p.drawText(legend_x + 14, 40, text);
    legend_x += 20 + p.fontMetrics().horizontalAdvance(text);
  }
  // Peaks as ticks: allocated (dark) and reserved (light).
  p.setPen(QPen(Qt::black, 2));
  const double peak = bar.width() * double(report_.allocated_peak) / double(scale);
  p.drawLine(QPointF(peak, 0), QPointF(peak, bar.height()));
  p.setPen(palette().color(QPalette::Mid));
  p.drawRect(bar);
}

void BlockMap::set_report(const MemoryReport& r) {
  report_ = r;
  update();
}

void BlockMap::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  if (report_.segment_map.empty()) {
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, "No device pool segments");
    return;
  }
  for (const PoolCell& c : layout_block_map(report_, size())) {
    const QColor fill = c.allocated ? owner_color(c.owner) : owner_color("cached free");
    p.fillRect(c.rect, fill);
    if (c.rect.width() > 3) {
      p.setPen(palette().color(QPalette::Base));
      p.drawLine(c.rect.topRight(), c.rect.bottomRight());
    }
  }
}

PoolView::PoolView(QWidget* parent)
    : QWidget(parent), cpu_(new QLabel), kept_(new QLabel), summary_(new QLabel), plan_(new QLabel), bar_(new OwnerBar), map_(new BlockMap), source_(new QLabel),
      capacity_(new QSlider(Qt::Horizontal)), capacity_label_(new QLabel("free memory")), capacity_title_(new QLabel("Capacity")) {
  source_->setObjectName("pool_source");
  source_->setWordWrap(true);
  source_->setForegroundRole(QPalette::PlaceholderText);
  summary_->setWordWrap(true);
  summary_->setObjectName("pool_summary");
  kept_->setObjectName("pool_kept");
  kept_->setWordWrap(true);
  kept_->hide();
  cpu_->setObjectName("cpu_resources");
  cpu_->setWordWrap(true);
  cpu_->hide();
  plan_->setObjectName("pool_plan");
  plan_->setWordWrap(true);
  plan_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  plan_->hide();
  capacity_->setRange(0, kSteps);
  capacity_->setObjectName("pool_capacity");
  capacity_->setToolTip("Cap the GPU memory pool to behave like a smaller card; the model reloads under the cap");
  auto* row = new QHBoxLayout;
  row->addWidget(capacity_title_);
  row->addWidget(capacity_, 1);
  row->addWidget(capacity_label_);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(cpu_);
  layout->addWidget(summary_);
  layout->addWidget(kept_);
  layout->addWidget(plan_);
  layout->addWidget(bar_);
  layout->addWidget(map_, 1);
  layout->addWidget(source_);
  layout->addLayout(row);
  auto label = [this](int v) { capacity_label_->setText(v == 0 ? "free memory" : QString("%1 MiB").arg(v * kStepMib)); };
  connect(capacity_, &QSlider::valueChanged, this, label);
  connect(capacity_, &QSlider::sliderReleased, this, [this] { emit capacityChosen(qint64(capacity_->value()) * kStepMib); });
  update_from({}, false);
}

void PoolView::set_plan(const QString& plan) {
  plan_->setText(plan);
  plan_->setVisible(!plan.isEmpty());
}

void PoolView::set_gpu_unavailable(const QString& reason) { gpu_unavailable_ = reason; }

void PoolView::set_vulkan_map(QWidget* map, const QString& source) {
  vulkan_map_ = map;
  vulkan_map_->setMinimumHeight(map_->sizeHint().height());
  static_cast<QVBoxLayout*>(layout())->insertWidget(layout()->indexOf(map_), vulkan_map_, 1);
  map_->hide();
  source_->setText(source);
}

void PoolView::use_painter(const QString& reason) {
  if (vulkan_map_) {
    vulkan_map_->hide();
    vulkan_map_->deleteLater();
    vulkan_map_ = nullptr;
  }
  map_->show();
  source_->setText("Drawn by QPainter from a host copy: " + reason);
}

void PoolView::update_from(const MemoryReport& r, bool device_memory) {
  bar_->set_report(r);
  map_->set_report(r);
  // Without a pool the capacity has nothing to cap: hidden, not a disabled slider that looks like a working one.
  for (QWidget* w : std::initializer_list<QWidget*>{capacity_title_, capacity_, capacity_label_}) w->setVisible(device_memory);
  cpu_->setVisible(!device_memory && !cpu_->text().isEmpty());
  // Without a pool the bar and the map have nothing to show (they were an empty bar and a black block).
  bar_->setVisible(r.available);
  if (!vulkan_map_) map_->setVisible(r.available);
  else vulkan_map_->setVisible(r.available);
  source_->setVisible(r.available);  // how a map is drawn, only under a map (it once captioned a blank)
  if (!r.available) {
    summary_->setText(device_memory ? "No pool report yet."
                      : gpu_unavailable_.isEmpty()
                          ? "The model runs on the CPU, which has no device memory pool. Switch to the GPU to watch the pool."
                          : "The model runs on the CPU, which has no device memory pool, and there is no GPU to switch "
                            "to: " + gpu_unavailable_);
    return;
  }
  summary_->setText(QString("allocated %1 (peak %2) · reserved %3 (peak %4) · capacity %5 · %6 segments, %7 blocks in "
                            "use · fragmentation %8 · out-of-memory retries %9")
                        .arg(mib(r.allocated), mib(r.allocated_peak), mib(r.reserved), mib(r.reserved_peak),
                             r.capacity < 0 ? QString("no limit") : mib(r.capacity))
                        .arg(r.segments).arg(r.active_blocks).arg(mib(r.fragmentation)).arg(r.oom_retries));
}

void PoolView::show_cpu_resources(const QString& text) {
  cpu_->setText(text);
  cpu_->setVisible(!capacity_->isVisible() && !text.isEmpty());
}

void PoolView::set_kept(const ConversationCacheStats& conversations, const VisionCacheStats& pictures) {
  const auto count = [](int64_t n, const char* what) { return QString("%1 %2%3").arg(n).arg(what).arg(n == 1 ? "" : "s"); };
  kept_->setText(QString("Kept between answers: %1' keys and values, %2 of %3 · %4' features, %5 of %6 (host memory)")
                     .arg(count(conversations.conversations, "chat"), mib(int64_t(conversations.bytes)),
                          mib(int64_t(conversations.budget)), count(pictures.images, "picture"), mib(int64_t(pictures.bytes)),
                          mib(int64_t(pictures.budget))) +
                 (pictures.recorded_tower_bytes > 0
                      ? QString(" · the vision tower recorded for one picture size, %1 (this pool)")
                            .arg(mib(int64_t(pictures.recorded_tower_bytes)))
                      : QString()));
  kept_->show();
}

QString PoolView::cpu_resources() const { return cpu_->isVisibleTo(this) ? cpu_->text() : QString(); }

}  // namespace qvl::ui
