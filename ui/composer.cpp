#include "ui/composer.h"

#include <QDir>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QFile>
#include <QFileInfo>
#include <QImageReader>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QStandardPaths>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>

#include "ui/chat_store.h"
#include "ui/dialog_folder.h"
#include "vision/image.h"
#include "vision/preprocess.h"

namespace qvl::ui {

namespace {

constexpr int kChipThumb = 56;
// A picture is scaled down only up to this many pixels: Qt may decode it whole first, at up to eight bytes a pixel
// (16-bit channels), so 2 GiB at most.
constexpr qint64 kMostPixelsToScale = qint64(1) << 28;
// Qt's decoder may take eight bytes a pixel (RGBA64 for 16-bit PNGs): its allocation limit for `pixels`, in MiB.
int allocation_limit_mib(qint64 pixels) { return int(pixels * 8 / (1 << 20)) + 1; }

// The size a picture shows at (its EXIF orientation applied), and whether reading it turns it a quarter.
struct Oriented {
  QSize size;
  bool turned = false;
};
Oriented oriented_size(QImageReader& reader) {
  reader.setAutoTransform(true);
  const bool turned = reader.transformation() & QImageIOHandler::TransformationRotate90;
  return {turned ? reader.size().transposed() : reader.size(), turned};
}

// The formats the engine decodes itself (vision/image_load.cpp), as Qt names them and file names end; others that Qt
// reads are attached as a PNG copy.
const QStringList kEngineFormats{"png", "jpg", "jpeg", "bmp", "webp"};
bool engine_reads(const QByteArray& qt_format) { return kEngineFormats.contains(QString(qt_format).toLower()); }

// Off the GUI thread: the picture sized from its header (more pixels than qvl reads: offered scaled down), decoded
// (refused here if it cannot be read, as the engine would; a format only Qt reads, such as GIF, marked for a PNG
// copy), its chip's thumbnail made from those pixels (an 8000 x 8000 picture once stalled typing when its chip
// decoded it again on the GUI thread), and, with a chat store, a copy kept there that the chat refers to (an attached
// file was referenced, and renaming it broke the chat).
ImageCheck check_image(const QString& path, const QString& store_dir, const QString& origin = {}) {
  QImageReader reader(path);
  const QSize size = oriented_size(reader).size;
  try {
    if (size.isValid() && qint64(size.width()) * size.height() > ImageLimits{}.max_pixels)
      return {{path, size.width(), size.height()}, {}, {}, true};
    const RgbImage image = load_image(path.toStdString());
    const QImage whole(image.pixels.data(), int(image.width), int(image.height), int(image.width) * 3,
                       QImage::Format_RGB888);
    QImage thumbnail = whole.scaled(kChipThumb, kChipThumb, Qt::KeepAspectRatio, Qt::SmoothTransformation);
    QString kept = path, error;
    if (!store_dir.isEmpty()) kept = keep_attachment(store_dir, path, &error);
    if (kept.isEmpty()) return {{path}, error};
    return {{kept, int(image.width), int(image.height), origin}, {}, std::move(thumbnail)};
  } catch (const std::exception& e) {
    ImageCheck refused{{path, size.width(), size.height()}, QString::fromStdString(e.what())};
    refused.convertible = !engine_reads(reader.format()) && reader.canRead();
    return refused;
  }
}

// The most pixels qvl reads, keeping the picture's shape.
QSize within_pixel_limit(int width, int height) {
  const double scale = std::sqrt(double(ImageLimits{}.max_pixels) / (double(width) * double(height)));
  return {std::max(1, int(width * scale)), std::max(1, int(height * scale))};
}

// A copy qvl made, saved into the chat store under the original's name, then checked as any picture (nothing
// half-made is left in the store when that fails).
ImageCheck keep_copy(const QImage& image, const Attachment& picture, const QString& name, PictureFormat format,
                     const QString& origin, const QString& store_dir) {
  QString error;
  const QString saved = save_picture_attachment(store_dir, image, &error, format, name);
  if (saved.isEmpty()) return {{picture.path}, error};
  ImageCheck check = check_image(saved, store_dir, origin);
  if (!check.error.isEmpty()) QFile::remove(saved);
  return check;
}

// Off the GUI thread: a copy of the picture scaled down to `fit` (as it shows), written into the chat store as a
// JPEG (quality 95), then checked as any. Measured with ImageMagick on an 8192 x 8192 plasma fractal (noisy, as a
// photo is): JPEG 29 MB in 1.6 s, an 8-bit PNG 100 MB in 14 s.
ImageCheck scaled_copy(const Attachment& picture, QSize fit, const QString& store_dir) {
  QImageReader reader(picture.path);
  const Oriented o = oriented_size(reader);
  reader.setAllocationLimit(allocation_limit_mib(qint64(picture.width) * picture.height));  // asked for, and bounded
  reader.setScaledSize(o.turned ? fit.transposed() : fit);  // the decoder scales before it turns
  QImage image = reader.read();
  if (image.isNull())
    return {{picture.path}, QFileInfo(picture.path).fileName() + ": cannot be scaled down (" + reader.errorString() + ")"};
  if (image.size() != fit) image = image.scaled(fit, Qt::KeepAspectRatio, Qt::SmoothTransformation);  // ignored by the format
  const QFileInfo original(picture.path);
  return keep_copy(image.convertToFormat(QImage::Format_RGB888), picture, original.completeBaseName() + " (scaled down)",
                   PictureFormat::Jpeg,
                   QString("scaled down from %1 × %2").arg(picture.width).arg(picture.height), store_dir);
}

// Off the GUI thread: a picture in a format the engine does not decode (GIF, TIFF, ...) but Qt does, kept as a PNG
// of the same pixels (an animation's first frame, as PIL's convert("RGB") takes it); a small GIF was refused while
// the Attach dialog listed GIF.
ImageCheck png_copy(const Attachment& picture, const QString& store_dir) {
  QImageReader reader(picture.path);
  reader.setAutoTransform(true);
  reader.setAllocationLimit(allocation_limit_mib(ImageLimits{}.max_pixels));  // sized within the limit already
  const QString format = QString(reader.format()).toUpper();
  const int frames = reader.imageCount();
  const QImage image = reader.read();
  const QFileInfo original(picture.path);
  if (image.isNull())
    return {{picture.path}, original.fileName() + ": cannot be read (" + reader.errorString() + ")"};
  const QString origin = QString("a PNG copy of a %1%2").arg(format, frames > 1 ? QString(", its first frame of %1").arg(frames) : "");
  return keep_copy(image, picture, original.completeBaseName(), PictureFormat::Png, origin, store_dir);
}

// The Attach dialog's filter: the engine's formats and every other one Qt reads here (attached as a PNG copy).
QString picture_filter() {
  QStringList formats = kEngineFormats;
  for (const QByteArray& f : QImageReader::supportedImageFormats())
    if (const QString name = QString(f).toLower(); !formats.contains(name)) formats << name;
  QStringList patterns;
  for (const QString& name : formats) patterns << "*." + name;
  return "Pictures (" + patterns.join(' ') + ");;All files (*)";
}

QStringList local_files(const QMimeData* data) {
  QStringList paths;
  for (const QUrl& url : data->urls())
    if (url.isLocalFile()) paths << url.toLocalFile();
  return paths;
}

}  // namespace

PromptEdit::PromptEdit(QWidget* parent) : QPlainTextEdit(parent) {
  setPlaceholderText("Ask about your images…  (Enter sends, Shift+Enter for a new line)");
  setTabChangesFocus(true);
}

void PromptEdit::keyPressEvent(QKeyEvent* event) {
  const bool enter = event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter;
  if (enter && !(event->modifiers() & Qt::ShiftModifier)) {
    emit submit();
    return;
  }
  QPlainTextEdit::keyPressEvent(event);
}

bool PromptEdit::canInsertFromMimeData(const QMimeData* source) const {
  return source->hasImage() || !local_files(source).isEmpty() || QPlainTextEdit::canInsertFromMimeData(source);
}

void PromptEdit::insertFromMimeData(const QMimeData* source) {
  if (const QStringList files = local_files(source); !files.isEmpty()) {
    emit filesDropped(files);
  } else if (source->hasImage()) {
    emit imagePasted(qvariant_cast<QImage>(source->imageData()));
  } else {
    QPlainTextEdit::insertFromMimeData(source);
  }
}

AttachmentChip::AttachmentChip(const Attachment& a, const QImage& thumbnail, QWidget* parent)
    : QFrame(parent), a_(a), name_(new QLabel), info_(new QLabel) {
  setFrameShape(QFrame::StyledPanel);
  setObjectName("attachment");
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* thumb = new QLabel;
  thumb->setPixmap(QPixmap::fromImage(thumbnail));
  thumb->setFixedSize(kChipThumb, kChipThumb);
  thumb->setAlignment(Qt::AlignCenter);
  auto* remove = new QToolButton;
  remove->setText("✕");
  remove->setToolTip("Remove this image");
  remove->setAutoRaise(true);
  connect(remove, &QToolButton::clicked, this, [this] { emit removeRequested(this); });
  // The file's name first (a scaled-down copy once showed only its size), cut to the chip's width; a copy qvl made
  // says of what.
  name_->setObjectName("attachment_name");
  const QString name = QFileInfo(a.path).fileName();
  name_->setText(name_->fontMetrics().elidedText(name, Qt::ElideMiddle, 180));
  auto* text = new QVBoxLayout;
  text->setSpacing(0);
  text->addWidget(name_);
  text->addWidget(info_);
  layout->addWidget(thumb);
  layout->addLayout(text);
  layout->addWidget(remove);
  setToolTip(a.origin.isEmpty() ? a.path : name + ": " + a.origin + "\n" + a.path);
}

void AttachmentChip::set_cost(const PreprocessorConfig& p) {
  QString line = QString("%1×%2").arg(a_.width).arg(a_.height);
  try {
    const auto [h, w] = model_input_size(a_.height, a_.width, p);
    line += QString(" → %1×%2\n%3 image tokens").arg(w).arg(h).arg(image_token_count(a_.height, a_.width, p));
    if (!a_.origin.isEmpty()) line += "\n" + a_.origin;
  } catch (const std::exception& e) {
    line += "\n" + QString::fromStdString(e.what());
  }
  info_->setText(line);
}

Composer::Composer(QWidget* parent)
    : QWidget(parent), edit_(new PromptEdit), strip_(new QWidget), strip_layout_(new QHBoxLayout(strip_)),
      strip_area_(new QScrollArea),
      send_(new QPushButton("Send")), attach_(new QToolButton) {
  setAcceptDrops(true);
  strip_layout_->setContentsMargins(0, 0, 0, 0);
  strip_layout_->addStretch();
  strip_area_->setObjectName("attachments");
  strip_area_->setWidget(strip_);
  strip_area_->setWidgetResizable(true);
  strip_area_->setFrameShape(QFrame::NoFrame);
  strip_area_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  strip_area_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);  // its chips never widen the window
  strip_area_->hide();
  attach_->setText("Attach…");
  attach_->setToolTip("Attach pictures (or drop them here, or paste one): PNG, JPEG, BMP and WebP as they are, other "
                      "formats (GIF, TIFF, ...) as a PNG copy");
  send_->setObjectName("send");
  edit_->setObjectName("prompt");
  edit_->setMaximumHeight(72);
  auto* row = new QHBoxLayout;
  row->addWidget(attach_, 0, Qt::AlignBottom);
  row->addWidget(edit_, 1);
  row->addWidget(send_, 0, Qt::AlignBottom);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 4, 8, 8);
  layout->addWidget(strip_area_);
  layout->addLayout(row);

  connect(edit_, &PromptEdit::submit, this, [this] {
    if (!busy_) send_or_stop();
  });
  connect(edit_, &QPlainTextEdit::textChanged, this, &Composer::draftChanged);
  connect(this, &Composer::attachmentsChanged, this, &Composer::draftChanged);
  connect(this, &Composer::draftChanged, this, &Composer::update_send);
  connect(edit_, &PromptEdit::filesDropped, this, &Composer::attach_files);
  connect(edit_, &PromptEdit::imagePasted, this, &Composer::attach_image);
  connect(send_, &QPushButton::clicked, this, &Composer::send_or_stop);
  connect(attach_, &QToolButton::clicked, this, [this] {
    const QStringList files = QFileDialog::getOpenFileNames(
        this, "Attach pictures", dialog_folder("composer/attach_folder", QStandardPaths::PicturesLocation), picture_filter());
    remember_dialog_folder("composer/attach_folder", files.value(0));
    attach_files(files);
  });
  set_can_send(false);
}

void Composer::set_footer(QWidget* footer) { static_cast<QVBoxLayout*>(layout())->addWidget(footer, 0, Qt::AlignRight); }

QString Composer::text() const { return edit_->toPlainText().trimmed(); }
void Composer::set_text(const QString& text) { edit_->setPlainText(text); }

QStringList Composer::image_paths() const {
  QStringList paths;
  for (const auto* chip : chips_) paths << chip->attachment().path;
  return paths;
}

void Composer::clear() {
  ++draft_;  // checks still running belong to the draft cleared
  next_place_ = 0;
  edit_->clear();
  for (auto* chip : chips_) chip->deleteLater();
  chips_.clear();
  strip_area_->hide();
  emit attachmentsChanged();
}

void Composer::set_busy(bool busy) {
  busy_ = busy;
  send_->setText(busy ? "Stop" : "Send");
  update_send();
}

void Composer::set_can_send(bool on) {
  can_send_ = on;
  update_send();
}

// Send looked enabled with nothing to send (#22): it is enabled by something written or attached, and says why not.
void Composer::update_send() {
  const bool something = !text().isEmpty() || !chips_.isEmpty();
  send_->setEnabled(busy_ || (can_send_ && something && pending_ == 0));
  send_->setToolTip(busy_ ? "Stop the answer (Esc)"
                          : !can_send_ ? "Open a model first (or wait for the answer)"
                          : pending_ > 0 ? "Wait for the pictures being checked"
                          : something ? "Send (Enter)" : "Write a question or attach a picture first");
}

void Composer::set_preprocessor(const PreprocessorConfig& preprocessor) {
  preprocessor_ = preprocessor;
  for (auto* chip : chips_) chip->set_cost(preprocessor_);
}

void Composer::attach_files(const QStringList& paths) {
  const QString store_dir = store_ ? store_->dir() : QString();
  for (const QString& path : paths) check_off_thread([path, store_dir] { return check_image(path, store_dir); });
}

void Composer::check_off_thread(std::function<ImageCheck()> check, int place) {
  ++pending_;
  update_send();  // not while a picture is still being checked
  if (place < 0) place = next_place_++;
  auto* watcher = new QFutureWatcher<ImageCheck>(this);
  // Checks finish in any order: each chip takes the place its file was given in (an edited question's pictures keep
  // their order; a GIF's PNG copy the GIF's), and a check of a draft cleared since is dropped.
  connect(watcher, &QFutureWatcher<ImageCheck>::finished, this, [this, watcher, draft = draft_, place] {
    const ImageCheck result = watcher->result();
    watcher->deleteLater();
    --pending_;
    update_send();
    if (draft != draft_) return;
    if (result.too_large) {
      offer_scaled_copy(result.attachment, place);
    } else if (result.convertible && store_) {
      const QString store_dir = store_->dir();
      check_off_thread([picture = result.attachment, store_dir] { return png_copy(picture, store_dir); }, place);
    } else if (result.error.isEmpty()) {
      add_chip(result.attachment, result.thumbnail, place);
    } else {
      emit attachmentRejected(result.error);
    }
  });
  watcher->setFuture(QtConcurrent::run(std::move(check)));
}

// Found when attached, not after sending: a picture over the model's pixel limit is offered as a copy scaled down to
// the limit (kept in the chat store), with the numbers in words (the limit once read "67108864").
void Composer::offer_scaled_copy(const Attachment& picture, int place) {
  const QString sizes = QString("%1 is %2 × %3 pixels (%4 M); qvl reads pictures of at most %5 M pixels")
                            .arg(QFileInfo(picture.path).fileName()).arg(picture.width).arg(picture.height)
                            .arg(double(picture.width) * picture.height / 1e6, 0, 'f', 1)
                            .arg(double(ImageLimits{}.max_pixels) / 1e6, 0, 'f', 1);  // "67.1", not "67108864"
  if (qint64(picture.width) * picture.height > kMostPixelsToScale || !store_) {
    emit attachmentRejected(sizes + (store_ ? ", and it is too large to scale down here." : "."));
    return;
  }
  const QSize fit = within_pixel_limit(picture.width, picture.height);
  auto* box = new QMessageBox(QMessageBox::Question, "Picture too large",
                              sizes + QString(".\n\nAttach a copy scaled down to %1 × %2?").arg(fit.width()).arg(fit.height()),
                              QMessageBox::Yes | QMessageBox::No, this);
  box->setObjectName("scale_down");
  box->setAttribute(Qt::WA_DeleteOnClose);
  connect(box, &QMessageBox::finished, this, [this, picture, fit, place, draft = draft_](int answer) {
    if (answer != QMessageBox::Yes || !store_ || draft != draft_) return;
    const QString store_dir = store_->dir();
    check_off_thread([picture, fit, store_dir] { return scaled_copy(picture, fit, store_dir); }, place);
  });
  box->open();  // window-modal, without a nested event loop
}

void Composer::attach_image(const QImage& image) {
  QString error;
  const QString path = store_ ? store_->save_attachment(image, &error) : QString();
  if (!store_) error = "no folder to keep a pasted image in";
  if (path.isEmpty()) emit attachmentRejected(error);
  else attach_files({path});
}

void Composer::add_chip(const Attachment& a, const QImage& thumbnail, int place) {
  auto* chip = new AttachmentChip(a, thumbnail);
  chip->setProperty("place", place);
  chip->set_cost(preprocessor_);
  connect(chip, &AttachmentChip::removeRequested, this, [this](AttachmentChip* c) {
    chips_.removeOne(c);
    c->deleteLater();
    strip_area_->setVisible(!chips_.isEmpty());
    emit attachmentsChanged();
  });
  const auto at = std::find_if(chips_.begin(), chips_.end(), [&](AttachmentChip* c) { return c->property("place").toInt() > place; });
  const int index = int(at - chips_.begin());
  chips_.insert(index, chip);
  strip_layout_->insertWidget(index, chip);
  // As tall as a chip, and its scroll bar when the chips are wider than the composer.
  strip_area_->setFixedHeight(chip->sizeHint().height() + strip_area_->horizontalScrollBar()->sizeHint().height());
  strip_area_->show();
  emit attachmentsChanged();
}

void Composer::send_or_stop() {
  if (busy_) {
    emit stopRequested();
    return;
  }
  if (!can_send_ || (text().isEmpty() && chips_.isEmpty()) || pending_ > 0) return;
  emit sendRequested(text(), image_paths());
}

void Composer::dragEnterEvent(QDragEnterEvent* event) {
  if (!local_files(event->mimeData()).isEmpty() || event->mimeData()->hasImage()) event->acceptProposedAction();
}

void Composer::dropEvent(QDropEvent* event) {
  if (const QStringList files = local_files(event->mimeData()); !files.isEmpty()) attach_files(files);
  else if (event->mimeData()->hasImage()) attach_image(qvariant_cast<QImage>(event->mimeData()->imageData()));
  event->acceptProposedAction();
}

}  // namespace qvl::ui
