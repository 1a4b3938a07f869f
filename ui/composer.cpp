#include "ui/composer.h"

#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QImageReader>
#include <QKeyEvent>
#include <QLabel>
#include <QMimeData>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "ui/chat_store.h"
#include "vision/image.h"
#include "vision/preprocess.h"

namespace qvl::ui {

namespace {

struct ImageCheck {
  Attachment attachment;
  QString error;
};

// Off the GUI thread: the picture decoded (its size, and refused here if it cannot be read) and, with a chat store,
// a copy kept there that the chat refers to (an attached file was referenced, and renaming it broke the chat).
ImageCheck check_image(const QString& path, const QString& store_dir) {
  try {
    const RgbImage image = load_image(path.toStdString());
    QString kept = path, error;
    if (!store_dir.isEmpty()) kept = keep_attachment(store_dir, path, &error);
    if (kept.isEmpty()) return {{path}, error};
    return {{kept, int(image.width), int(image.height)}, {}};
  } catch (const std::exception& e) {
    return {{path}, QString::fromStdString(e.what())};
  }
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

AttachmentChip::AttachmentChip(const Attachment& a, QWidget* parent) : QFrame(parent), a_(a), info_(new QLabel) {
  setFrameShape(QFrame::StyledPanel);
  setObjectName("attachment");
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* thumb = new QLabel;
  QImageReader reader(a.path);
  reader.setAutoTransform(true);
  const QSize size = reader.size();
  if (size.isValid()) reader.setScaledSize(size.scaled(56, 56, Qt::KeepAspectRatio));
  thumb->setPixmap(QPixmap::fromImage(reader.read()));
  thumb->setFixedSize(56, 56);
  thumb->setAlignment(Qt::AlignCenter);
  auto* remove = new QToolButton;
  remove->setText("✕");
  remove->setToolTip("Remove this image");
  remove->setAutoRaise(true);
  connect(remove, &QToolButton::clicked, this, [this] { emit removeRequested(this); });
  layout->addWidget(thumb);
  layout->addWidget(info_);
  layout->addWidget(remove);
  setToolTip(a.path);
}

void AttachmentChip::set_cost(const PreprocessorConfig& p) {
  QString line = QString("%1×%2").arg(a_.width).arg(a_.height);
  try {
    const auto [h, w] = model_input_size(a_.height, a_.width, p);
    line += QString(" → %1×%2\n%3 image tokens").arg(w).arg(h).arg(image_token_count(a_.height, a_.width, p));
  } catch (const std::exception& e) {
    line += "\n" + QString::fromStdString(e.what());
  }
  info_->setText(line);
}

Composer::Composer(QWidget* parent)
    : QWidget(parent), edit_(new PromptEdit), strip_(new QWidget), strip_layout_(new QHBoxLayout(strip_)),
      send_(new QPushButton("Send")), attach_(new QToolButton) {
  setAcceptDrops(true);
  strip_layout_->setContentsMargins(0, 0, 0, 0);
  strip_layout_->addStretch();
  strip_->hide();
  attach_->setText("Attach…");
  attach_->setToolTip("Attach images (or drop them here, or paste one)");
  send_->setObjectName("send");
  edit_->setObjectName("prompt");
  edit_->setMaximumHeight(72);
  auto* row = new QHBoxLayout;
  row->addWidget(attach_, 0, Qt::AlignBottom);
  row->addWidget(edit_, 1);
  row->addWidget(send_, 0, Qt::AlignBottom);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 4, 8, 8);
  layout->addWidget(strip_);
  layout->addLayout(row);

  connect(edit_, &PromptEdit::submit, this, [this] {
    if (!busy_) send_or_stop();
  });
  connect(edit_, &PromptEdit::filesDropped, this, &Composer::attach_files);
  connect(edit_, &PromptEdit::imagePasted, this, &Composer::attach_image);
  connect(send_, &QPushButton::clicked, this, &Composer::send_or_stop);
  connect(attach_, &QToolButton::clicked, this, [this] {
    const QStringList files = QFileDialog::getOpenFileNames(this, "Attach images", {},
                                                            "Images (*.png *.jpg *.jpeg *.bmp *.webp *.tif *.tiff *.gif);;All files (*)");
    attach_files(files);
  });
  set_can_send(false);
}

QString Composer::text() const { return edit_->toPlainText().trimmed(); }
void Composer::set_text(const QString& text) { edit_->setPlainText(text); }

QStringList Composer::image_paths() const {
  QStringList paths;
  for (const auto* chip : chips_) paths << chip->attachment().path;
  return paths;
}

void Composer::clear() {
  edit_->clear();
  for (auto* chip : chips_) chip->deleteLater();
  chips_.clear();
  strip_->hide();
  emit attachmentsChanged();
}

void Composer::set_busy(bool busy) {
  busy_ = busy;
  send_->setText(busy ? "Stop" : "Send");
  send_->setToolTip(busy ? "Stop the answer (Esc)" : "Send (Enter)");
  send_->setEnabled(busy || can_send_);
}

void Composer::set_can_send(bool on) {
  can_send_ = on;
  send_->setEnabled(busy_ || on);
}

void Composer::set_preprocessor(const PreprocessorConfig& preprocessor) {
  preprocessor_ = preprocessor;
  for (auto* chip : chips_) chip->set_cost(preprocessor_);
}

void Composer::attach_files(const QStringList& paths) {
  for (const QString& path : paths) {
    ++pending_;
    auto* watcher = new QFutureWatcher<ImageCheck>(this);
    connect(watcher, &QFutureWatcher<ImageCheck>::finished, this, [this, watcher] {
      const ImageCheck check = watcher->result();
      watcher->deleteLater();
      --pending_;
      if (check.error.isEmpty()) add_chip(check.attachment);
      else emit attachmentRejected(check.error);
    });
    watcher->setFuture(QtConcurrent::run(check_image, path, store_ ? store_->dir() : QString()));
  }
}

void Composer::attach_image(const QImage& image) {
  QString error;
  const QString path = store_ ? store_->save_attachment(image, &error) : QString();
  if (!store_) error = "no folder to keep a pasted image in";
  if (path.isEmpty()) emit attachmentRejected(error);
  else attach_files({path});
}

void Composer::add_chip(const Attachment& a) {
  auto* chip = new AttachmentChip(a);
  chip->set_cost(preprocessor_);
  connect(chip, &AttachmentChip::removeRequested, this, [this](AttachmentChip* c) {
    chips_.removeOne(c);
    c->deleteLater();
    strip_->setVisible(!chips_.isEmpty());
    emit attachmentsChanged();
  });
  chips_.append(chip);
  strip_layout_->insertWidget(strip_layout_->count() - 1, chip);
  strip_->show();
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
