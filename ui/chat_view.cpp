#include "ui/chat_view.h"

#include <QAbstractTextDocumentLayout>
#include <QApplication>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QFileInfo>
#include <QDialog>
#include <QMenu>
#include <QTextBrowser>
#include <QTextCursor>
#include <QVBoxLayout>
#include <QPainter>
#include <QScrollBar>

#include "ui/chat_model.h"
#include "ui/picture_loader.h"

namespace qvl::ui {

namespace {
constexpr int kMargin = 10, kPadding = 12, kHeader = 20, kThumb = 72, kFooter = 18;

}  // namespace

MessageDelegate::MessageDelegate(QListView* view)
    : QStyledItemDelegate(view), view_(view), thumbnails_(new PictureThumbnails(kThumb, this)) {
  connect(thumbnails_, &PictureThumbnails::ready, view_->viewport(), qOverload<>(&QWidget::update));
}

int MessageDelegate::card_width() const { return std::max(200, view_->viewport()->width() - 2 * kMargin); }

QTextDocument& MessageDelegate::document(const QModelIndex& index, int width) const {
  const QString text = index.data(Qt::DisplayRole).toString();
  // Markdown is parsed once the answer is complete: re-parsing the whole growing answer ~30 times a second is the
  // GUI thread's largest cost while streaming.
  const bool markdown = index.data(ChatModel::RoleRole).toString() == "assistant" &&
                        !index.data(ChatModel::FailedRole).toBool() && !index.data(ChatModel::StreamingRole).toBool();
  Layout& l = cache_[index.row()];
  // (Not after a lone CR: set whole, "\r\n" is one line break, and a flush between the two would make it two.)
  if (l.doc && !markdown && !l.markdown && text.size() > l.text.size() && !l.text.endsWith(u'\r') &&
      text.startsWith(l.text)) {
    // A streaming answer grew: only the new text goes in, and the layout is redone from the block it joins. Set
    // again whole, the document was shaped and broken into lines from its first character at every flush (30 a
    // second): 26 ms of the GUI thread early in a 2,000-token answer, 65 ms near its end (2-core machine).
    QTextCursor end(l.doc.get());
    end.movePosition(QTextCursor::End);
    end.insertText(text.sliced(l.text.size()));
    l.text = text;
  } else if (!l.doc || l.text != text || l.markdown != markdown) {
    l.doc = std::make_shared<QTextDocument>();
    l.doc->setUndoRedoEnabled(false);  // appended to while it streams: no undo history kept
    l.doc->setDefaultFont(view_->font());
    if (markdown) l.doc->setMarkdown(text);
    else l.doc->setPlainText(text);
    l.text = text;
    l.markdown = markdown;
    l.width = -1;
  }
  if (l.width != width) {
    l.doc->setTextWidth(width);
    l.width = width;
  }
  return *l.doc;
}

void MessageDelegate::forget_all() const { cache_.clear(); }

QSize MessageDelegate::sizeHint(const QStyleOptionViewItem&, const QModelIndex& index) const {
  const int width = card_width();
  int h = kPadding + kHeader + int(document(index, width - 2 * kPadding).size().height()) + kPadding;
  if (!index.data(ChatModel::ImagesRole).toStringList().isEmpty()) h += kThumb + 6;
  if (!index.data(ChatModel::StatsRole).toString().isEmpty()) h += kFooter;
  return {width + 2 * kMargin, h + kMargin};
}

void MessageDelegate::paint(QPainter* p, const QStyleOptionViewItem& option, const QModelIndex& index) const {
  p->save();
  const bool user = index.data(ChatModel::RoleRole).toString() == "user";
  const bool failed = index.data(ChatModel::FailedRole).toBool();
  const QPalette& pal = option.palette;
  QRect card = option.rect.adjusted(kMargin, kMargin / 2, -kMargin, -kMargin / 2);
  QColor fill = user ? pal.color(QPalette::AlternateBase) : pal.color(QPalette::Base);
  if (failed) fill = QColor(255, 235, 235);
  p->setRenderHint(QPainter::Antialiasing);
  p->setPen(option.state & QStyle::State_Selected ? pal.color(QPalette::Highlight) : pal.color(QPalette::Mid));
  p->setBrush(fill);
  p->drawRoundedRect(card, 8, 8);

  int y = card.top() + kPadding;
  QFont bold = option.font;
  bold.setBold(true);
  p->setFont(bold);
  p->setPen(pal.color(QPalette::Text));
  QString who = user ? "You" : "Assistant";
  if (index.data(ChatModel::StreamingRole).toBool()) who += "  ·  answering…";
  p->drawText(QRect(card.left() + kPadding, y, card.width() - 2 * kPadding, kHeader), Qt::AlignLeft | Qt::AlignVCenter, who);
  y += kHeader;

  const QStringList images = index.data(ChatModel::ImagesRole).toStringList();
  if (!images.isEmpty()) {
    int x = card.left() + kPadding;
    for (const QString& path : images) {
      const std::optional<QPixmap> thumb = thumbnails_->find(path);  // decoded off the GUI thread
      if (!thumb || thumb->isNull()) {
        p->drawText(QRect(x, y, 140, kThumb), Qt::AlignCenter | Qt::TextWordWrap,
                    QFileInfo(path).fileName() + (thumb ? "\n(missing)" : "\n(loading)"));
        x += 146;
      } else {
        p->drawPixmap(x, y, *thumb);
        x += thumb->width() + 6;
      }
    }
    y += kThumb + 6;
  }

  QTextDocument& doc = document(index, card.width() - 2 * kPadding);
  p->translate(card.left() + kPadding, y);
  QAbstractTextDocumentLayout::PaintContext ctx;
  ctx.palette = pal;
  ctx.palette.setColor(QPalette::Text, failed ? QColor(150, 0, 0) : pal.color(QPalette::Text));
  // Only the lines in sight are drawn: a long answer followed at the bottom shows its last few hundred pixels.
  ctx.clip = QRectF(view_->viewport()->rect().intersected(option.rect)).translated(-(card.left() + kPadding), -y);
  doc.documentLayout()->draw(p, ctx);
  p->translate(-(card.left() + kPadding), -y);
  y += int(doc.size().height());

  const QString stats = index.data(ChatModel::StatsRole).toString();
  if (!stats.isEmpty()) {
    QFont small = option.font;
    small.setPointSizeF(small.pointSizeF() * 0.85);
    p->setFont(small);
    p->setPen(pal.color(QPalette::PlaceholderText));
    p->drawText(QRect(card.left() + kPadding, y, card.width() - 2 * kPadding, kFooter), Qt::AlignLeft | Qt::AlignVCenter, stats);
  }
  p->restore();
}

// A new chat was a blank page (#22, the new-user trial): it says how to begin.
QString ChatView::empty_hint() const {
  if (model() && model()->rowCount() > 0) return {};
  return "Ask about a picture: attach one (Attach…, drop it here, or paste it) and type a question.\n"
         "Help ▸ Try a sample picture gives you one to start with.";
}

void ChatView::paintEvent(QPaintEvent* event) {
  QListView::paintEvent(event);
  const QString hint = empty_hint();
  if (hint.isEmpty()) return;
  QPainter painter(viewport());
  painter.setPen(palette().color(QPalette::PlaceholderText));
  painter.drawText(viewport()->rect().adjusted(24, 24, -24, -24), Qt::AlignCenter | Qt::TextWordWrap, hint);
}

ChatView::ChatView(QWidget* parent) : QListView(parent), delegate_(new MessageDelegate(this)) {
  setItemDelegate(delegate_);
  setVerticalScrollMode(QAbstractItemView::ScrollPerPixel);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setSelectionMode(QAbstractItemView::SingleSelection);
  setResizeMode(QListView::Adjust);
  setUniformItemSizes(false);
  setFrameShape(QFrame::NoFrame);
  verticalScrollBar()->setSingleStep(24);
  connect(verticalScrollBar(), &QScrollBar::valueChanged, this,
          [this](int v) { follow_ = v >= verticalScrollBar()->maximum() - 4; });
  connect(verticalScrollBar(), &QScrollBar::rangeChanged, this, [this](int, int max) {
    if (follow_) verticalScrollBar()->setValue(max);
  });
}

void ChatView::setModel(QAbstractItemModel* model) {
  QListView::setModel(model);
  connect(model, &QAbstractItemModel::modelReset, this, [this] {
    delegate_->forget_all();
    follow_ = true;
  });
  connect(model, &QAbstractItemModel::rowsRemoved, this, [this] { delegate_->forget_all(); });
  connect(model, &QAbstractItemModel::rowsInserted, this, [this] { follow_ = true; });
  connect(model, &QAbstractItemModel::dataChanged, this, [this](const QModelIndex& first) {
    emit delegate_->sizeHintChanged(first);  // the answer grew: lay the rows out again (others come from the cache)
  });
}

void ChatView::copy_current() {
  const QModelIndex i = currentIndex();
  if (i.isValid()) QApplication::clipboard()->setText(i.data(Qt::DisplayRole).toString());
}

void ChatView::contextMenuEvent(QContextMenuEvent* event) {
  const QModelIndex i = indexAt(event->pos());
  if (!i.isValid()) return;
  setCurrentIndex(i);
  QMenu menu(this);
  menu.addAction("Copy message", this, &ChatView::copy_current);
  menu.addAction("Select text…", this, [this, row = i.row()] { show_selectable(row); });
  if (i.data(ChatModel::RoleRole).toString() == "user")
    menu.addAction("Edit and resend", this, [this, row = i.row()] { emit editRequested(row); });
  menu.exec(event->globalPos());
}

void ChatView::show_selectable(int row) {
  const QModelIndex i = model()->index(row, 0);
  if (!i.isValid()) return;
  auto* dialog = new QDialog(this);
  dialog->setObjectName("message_text");
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(i.data(ChatModel::RoleRole).toString() == "user" ? "Your question" : "The answer");
  auto* text = new QTextBrowser;
  text->setOpenExternalLinks(true);  // a link opens outside, not in place of the message
  // As the bubble shows it: an answer as Markdown, a question or an error as the plain text it is.
  const bool markdown = i.data(ChatModel::RoleRole).toString() == "assistant" && !i.data(ChatModel::FailedRole).toBool();
  if (markdown) text->setMarkdown(i.data(Qt::DisplayRole).toString());
  else text->setPlainText(i.data(Qt::DisplayRole).toString());
  text->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard | Qt::LinksAccessibleByMouse);
  auto* layout = new QVBoxLayout(dialog);
  layout->addWidget(text);
  dialog->resize(640, 480);
  dialog->show();
}

void ChatView::keyPressEvent(QKeyEvent* event) {
  if (event->matches(QKeySequence::Copy)) {
    copy_current();
    return;
  }
  QListView::keyPressEvent(event);
}

void ChatView::resizeEvent(QResizeEvent* event) {
  QListView::resizeEvent(event);
  scheduleDelayedItemsLayout();  // the cards' text wraps at the new width
}

}  // namespace qvl::ui
