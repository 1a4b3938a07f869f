#include "ui/attention_panel.h"

#include <QComboBox>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "ui/picture_loader.h"

namespace qvl::ui {

namespace {
constexpr int kPreviewSide = 1024;  // the QPainter path's picture, decoded at most this large (off the GUI thread)

}  // namespace

void HeatPainter::set_picture(const QImage& picture) {
  picture_ = picture;
  heat_.clear();
  update();
}

void HeatPainter::set_heat(const QVector<float>& heat, int grid_w, int grid_h) {
  heat_ = heat;
  grid_w_ = grid_w;
  grid_h_ = grid_h;
  update();
}

void HeatPainter::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  if (picture_.isNull()) {
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, "Ask about a picture to see where the model looks");
    return;
  }
  const QSize fitted = picture_.size().scaled(size(), Qt::KeepAspectRatio);
  const QRect area(QPoint((width() - fitted.width()) / 2, (height() - fitted.height()) / 2), fitted);
  p.drawImage(area, picture_);
  if (heat_.size() != grid_w_ * grid_h_ || grid_w_ == 0) return;
  for (int y = 0; y < grid_h_; ++y)
    for (int x = 0; x < grid_w_; ++x) {
      const float level = heat_[y * grid_w_ + x] / 255.0f;
      const QRectF cell(area.x() + area.width() * double(x) / grid_w_, area.y() + area.height() * double(y) / grid_h_,
                        double(area.width()) / grid_w_, double(area.height()) / grid_h_);
      p.fillRect(cell, QColor::fromHsvF(0.66f * (1.0f - level), 1.0f, 1.0f, 0.7f * level));
    }
}

AttentionPanel::AttentionPanel(QWidget* parent)
    : QWidget(parent), layer_(new QComboBox), head_(new QComboBox), status_(new QLabel), source_(new QLabel),
      painter_(new HeatPainter) {
  layer_->setObjectName("attention_layer");
  head_->setObjectName("attention_head");
  status_->setObjectName("attention_status");
  source_->setObjectName("attention_source");
  source_->setWordWrap(true);
  source_->setForegroundRole(QPalette::PlaceholderText);
  layer_->setToolTip("The decoder layer whose attention is shown (off: no tap runs, nothing is computed)");
  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel("Layer"));
  row->addWidget(layer_, 1);
  row->addWidget(new QLabel("Head"));
  row->addWidget(head_, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(row);
  layout->addWidget(painter_, 1);
  layout->addWidget(status_);
  layout->addWidget(source_);
  set_model(0, 0);
  connect(layer_, &QComboBox::currentIndexChanged, this, &AttentionPanel::emit_choice);
  connect(head_, &QComboBox::currentIndexChanged, this, &AttentionPanel::emit_choice);
}

void AttentionPanel::set_model(int layers, int heads) {
  const QSignalBlocker block_layer(layer_), block_head(head_);
  layer_->clear();
  layer_->addItem("off", -1);
  for (int l = 0; l < layers; ++l) layer_->addItem(QString("layer %1").arg(l), l);
  head_->clear();
  head_->addItem("mean of heads", -1);
  for (int h = 0; h < heads; ++h) head_->addItem(QString("head %1").arg(h), h);
  layer_->setCurrentIndex(layers > 0 ? 1 : 0);  // the first layer: on the demo model it looks at what it names
  emit_choice();
}

void AttentionPanel::emit_choice() {
  const qint64 layer = layer_->currentData().toLongLong(), head = head_->currentData().toLongLong();
  head_->setEnabled(layer >= 0);
  status_->setText(layer < 0 ? "Off." : "Waiting for an answer about a picture.");
  emit viewChosen(isVisible() ? layer : -1, head);
}

void AttentionPanel::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  emit_choice();
}

void AttentionPanel::hideEvent(QHideEvent* event) {
  QWidget::hideEvent(event);
  emit viewChosen(-1, -1);
}

void AttentionPanel::set_picture(const QString& path) {
  emit pictureChosen(path);
  if (vulkan_view_) return;
  auto* watcher = new QFutureWatcher<QImage>(this);
  connect(watcher, &QFutureWatcher<QImage>::finished, this, [this, watcher] {
    painter_->set_picture(watcher->result());
    watcher->deleteLater();
  });
  watcher->setFuture(QtConcurrent::run(load_scaled_picture, path, QSize(kPreviewSide, kPreviewSide)));
}

void AttentionPanel::set_vulkan_view(QWidget* view, const QString& source) {
  vulkan_view_ = view;
  static_cast<QVBoxLayout*>(layout())->insertWidget(layout()->indexOf(painter_), view, 1);
  painter_->hide();
  source_->setText(source);
}

void AttentionPanel::use_painter(const QString& reason) {
  if (vulkan_view_) {
    vulkan_view_->hide();
    vulkan_view_->deleteLater();
    vulkan_view_ = nullptr;
  }
  painter_->show();
  source_->setText("Drawn by QPainter from a host copy: " + reason);
}

void AttentionPanel::show_heat(const QVector<float>& heat, int grid_w, int grid_h, qint64 layer, qint64 head) {
  painter_->set_heat(heat, grid_w, grid_h);
  show_frame(grid_w, grid_h, layer, head);
}

void AttentionPanel::show_frame(int grid_w, int grid_h, qint64 layer, qint64 head) {
  status_->setText(QString("Layer %1, %2: %3 x %4 patches")
                       .arg(layer)
                       .arg(head < 0 ? QString("mean of heads") : QString("head %1").arg(head))
                       .arg(grid_w)
                       .arg(grid_h));
}

}  // namespace qvl::ui
