#include "ui/picture_loader.h"

#include <QFutureWatcher>
#include <QImageReader>
#include <QtConcurrent/QtConcurrentRun>

#include "vision/image.h"

namespace qvl::ui {

namespace {

// The picture as the engine itself decodes it (what the model sees), for what Qt cannot read: a WebP was answered
// while its bubble read "(missing)" on a Qt without the WebP plugin.
QImage engine_decoded(const QString& path) {
  try {
    const RgbImage rgb = load_image(path.toStdString());
    return QImage(rgb.pixels.data(), int(rgb.width), int(rgb.height), int(rgb.width) * 3, QImage::Format_RGB888).copy();
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

QImage load_scaled_picture(const QString& path, QSize fit) {
  QImageReader reader(path);
  reader.setAutoTransform(true);
  // As large as the engine accepts, where a format decodes whole before scaling (PNG): up to eight bytes a pixel
  // (RGBA64 for 16-bit channels).
  reader.setAllocationLimit(int(ImageLimits{}.max_pixels * 8 / (1 << 20)) + 1);
  const QSize size = reader.size();
  if (size.isValid() && (size.width() > fit.width() || size.height() > fit.height()))
    reader.setScaledSize(size.scaled(fit, Qt::KeepAspectRatio));
  QImage image = reader.read();
  if (image.isNull()) image = engine_decoded(path);  // a format this Qt has no plugin for (WebP without qt6-image-formats)
  if (image.isNull()) return {};
  if (image.width() > fit.width() || image.height() > fit.height())  // a format that ignored the scaled size
    image = image.scaled(fit, Qt::KeepAspectRatio, Qt::SmoothTransformation);
  return image;
}

PictureThumbnails::PictureThumbnails(int height, QObject* parent) : QObject(parent), height_(height) {
  loaded_.setMaxCost(kMaxCostKib);
}

std::optional<QPixmap> PictureThumbnails::find(const QString& path) {
  if (const QPixmap* p = loaded_.object(path)) return *p;
  if (loading_.contains(path)) return std::nullopt;
  loading_.insert(path);
  auto* watcher = new QFutureWatcher<QImage>(this);
  connect(watcher, &QFutureWatcher<QImage>::finished, this, [this, watcher, path] {
    auto* pixmap = new QPixmap(QPixmap::fromImage(watcher->result()));  // QPixmap only on the GUI thread
    loaded_.insert(path, pixmap, std::max<qsizetype>(1, qsizetype(pixmap->width()) * pixmap->height() * 4 / 1024));
    loading_.remove(path);
    watcher->deleteLater();
    emit ready(path);
  });
  const int height = height_;
  watcher->setFuture(QtConcurrent::run([path, height] { return load_scaled_picture(path, QSize(4 * height, height)); }));
  return std::nullopt;
}

}  // namespace qvl::ui
