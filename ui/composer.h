#pragma once
// Where the user writes: the prompt box (Enter sends, Shift+Enter breaks the line), the attached images (by button,
// drag-and-drop or paste), each with its thumbnail, resized size and token cost, and the Send/Stop button.
// Images are decoded off the GUI thread with the engine's own loader, so a corrupt file is refused with its reason
// before it can reach a request.
#include <QFrame>
#include <QImage>
#include <QPlainTextEdit>
#include <QWidget>
#include <functional>

#include "io/model_config.h"

class QHBoxLayout;
class QLabel;
class QPushButton;
class QScrollArea;
class QToolButton;

namespace qvl::ui {

class ChatStore;

class PromptEdit : public QPlainTextEdit {
  Q_OBJECT
public:
  explicit PromptEdit(QWidget* parent = nullptr);
signals:
  void submit();
  void imagePasted(const QImage& image);
  void filesDropped(const QStringList& paths);

protected:
  void keyPressEvent(QKeyEvent* event) override;
  bool canInsertFromMimeData(const QMimeData* source) const override;
  void insertFromMimeData(const QMimeData* source) override;
};

struct Attachment {
  QString path;
  int width = 0, height = 0;  // as decoded (EXIF orientation applied)
  QString origin;             // for a copy qvl made: of what ("a PNG copy of clip.gif"), shown on its chip
};

// A picture checked off the GUI thread (composer.cpp): its attachment and chip thumbnail, or why it was refused, or
// that it has more pixels than the model reads (too_large: the composer offers a copy scaled down), or that it is in
// a format Qt reads and the engine does not (convertible, with the engine's reason in `error`: a PNG copy is made).
struct ImageCheck {
  Attachment attachment;
  QString error;
  QImage thumbnail;
  bool too_large = false;
  bool convertible = false;
};

class AttachmentChip : public QFrame {
  Q_OBJECT
public:
  AttachmentChip(const Attachment& a, const QImage& thumbnail, QWidget* parent = nullptr);
  const Attachment& attachment() const { return a_; }
  void set_cost(const PreprocessorConfig& preprocessor);
signals:
  void removeRequested(AttachmentChip* chip);

private:
  Attachment a_;
  QLabel* name_;
  QLabel* info_;
};

class Composer : public QWidget {
  Q_OBJECT
public:
  explicit Composer(QWidget* parent = nullptr);

  QString text() const;
  void set_text(const QString& text);
  QStringList image_paths() const;
  void clear();
  void set_busy(bool busy);    // Send becomes Stop
  void set_can_send(bool on);  // no model: nothing to send to
  void set_preprocessor(const PreprocessorConfig& preprocessor);  // for the token costs shown on the chips
  void attach_files(const QStringList& paths);
  void attach_image(const QImage& image);  // pasted: written to the chat store's attachments first
  void set_store(ChatStore* store) { store_ = store; }
  int pending_checks() const { return pending_; }
  // A line under the prompt (the context meter).
  void set_footer(QWidget* footer);

signals:
  void sendRequested(const QString& text, const QStringList& images);
  void stopRequested();
  void attachmentRejected(const QString& message);
  void attachmentsChanged();
  void draftChanged();  // the text or the pictures (the context meter counts again)

protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

private:
  void add_chip(const Attachment& a, const QImage& thumbnail, int place);  // place: the order files were given in
  // Runs `check` on a worker; its picture becomes a chip, is refused with the reason, or is offered scaled down.
  // place: the order the file was given in; a copy made of a picture (PNG, scaled down) keeps the original's.
  void check_off_thread(std::function<ImageCheck()> check, int place = -1);
  void offer_scaled_copy(const Attachment& picture, int place);
  void send_or_stop();
  void update_send();  // enabled while busy (Stop), or with a model and something to send

  PromptEdit* edit_;
  QWidget* strip_;
  QHBoxLayout* strip_layout_;
  QScrollArea* strip_area_;  // the chips scroll sideways (five of them once widened the whole window)
  QPushButton* send_;
  QToolButton* attach_;
  QList<AttachmentChip*> chips_;
  PreprocessorConfig preprocessor_;
  ChatStore* store_ = nullptr;  // where pasted images are kept (the window's)
  bool busy_ = false, can_send_ = false;
  int pending_ = 0;  // images still being checked
  quint64 draft_ = 0;  // bumped by clear()
  int next_place_ = 0;
};

}  // namespace qvl::ui
