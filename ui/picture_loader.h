#pragma once
// Pictures for the app's views, bubbles and chips: decoded off the GUI thread, scaled while decoding where the format
// can, and allowed to be as large as the engine accepts (Qt's own allocation limit of 128 MB refused an 8000 x 8000
// PNG the engine answers, and its bubble read "(missing)"; decoding it on the GUI thread stalled typing ~0.4 s).
#include <QCache>
#include <QImage>
#include <QObject>
#include <QPixmap>
#include <QSet>
#include <QSize>
#include <QString>
#include <optional>

namespace qvl::ui {

// The picture at `path` fitted into `fit` (never enlarged), EXIF orientation applied; a null image when it cannot be
// read. Any thread.
QImage load_scaled_picture(const QString& path, QSize fit);

// Thumbnails of one height, loaded on a worker thread and kept by path (GUI thread only).
class PictureThumbnails : public QObject {
  Q_OBJECT
public:
  PictureThumbnails(int height, QObject* parent);
  // The thumbnail when it has been loaded (a null pixmap: the file could not be read); nullopt while it loads, the
  // load started on the first ask (ready() follows).
  std::optional<QPixmap> find(const QString& path);

signals:
  void ready(const QString& path);

private:
  static constexpr int kMaxCostKib = 64 * 1024;  // the thumbnails kept, by their pixels' bytes (least recent go)
  int height_;
  QCache<QString, QPixmap> loaded_;
  QSet<QString> loading_;
};

}  // namespace qvl::ui
