#pragma once
// The transcript: a list view whose delegate draws each turn as a card — who spoke, the user's image thumbnails,
// the text (assistant answers rendered as Markdown), and the answer's statistics. Layouts are cached per turn, so
// long chats scroll smoothly; the view follows a streaming answer while it is scrolled to the bottom.
#include <QListView>
#include <QStyledItemDelegate>
#include <QTextDocument>
#include <memory>

namespace qvl::ui {

class PictureThumbnails;

class MessageDelegate : public QStyledItemDelegate {
  Q_OBJECT
public:
  explicit MessageDelegate(QListView* view);
  void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
  QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
  void forget_all() const;

private:
  struct Layout {
    QString text;
    bool markdown = false;
    int width = 0;
    std::shared_ptr<QTextDocument> doc;
  };
  QTextDocument& document(const QModelIndex& index, int width) const;
  int card_width() const;
  QListView* view_;
  PictureThumbnails* thumbnails_;  // the bubbles' pictures
  mutable QHash<int, Layout> cache_;
};

class ChatView : public QListView {
  Q_OBJECT
public:
  explicit ChatView(QWidget* parent = nullptr);
  void setModel(QAbstractItemModel* model) override;
  void copy_current();  // the selected turn's text to the clipboard
  void show_selectable(int row);  // the turn in a window where any part of it can be selected and copied
  QString empty_hint() const;     // what an empty chat shows (empty once it has a turn)

signals:
  void editRequested(int row);  // "Edit and resend" on one of your questions

protected:
  void contextMenuEvent(QContextMenuEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void paintEvent(QPaintEvent* event) override;

private:
  MessageDelegate* delegate_;
  bool follow_ = true;  // scrolled to the bottom: stay there as the answer grows
};

}  // namespace qvl::ui
