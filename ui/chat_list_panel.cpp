#include "ui/chat_list_panel.h"

#include <QAction>
#include <QLabel>
#include <QMenu>
#include <QLineEdit>
#include <QListWidget>
#include <QSignalBlocker>
#include <QVBoxLayout>
#include <algorithm>

namespace qvl::ui {

ChatListPanel::ChatListPanel(QWidget* parent) : QWidget(parent), search_(new QLineEdit), list_(new QListWidget) {
  search_->setObjectName("chat_search");
  search_->setPlaceholderText("Search chats");
  search_->setClearButtonEnabled(true);
  list_->setObjectName("chat_list");
  list_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);  // long titles end in "…", no scroll bar
  list_->setTextElideMode(Qt::ElideRight);
  list_->setUniformItemSizes(true);
  list_->setEditTriggers(QAbstractItemView::EditKeyPressed);  // F2; one click opens, so no edit on click
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  no_match_ = new QLabel("No chat has all these words.");
  no_match_->setObjectName("no_chat_matches");
  no_match_->setWordWrap(true);
  no_match_->hide();
  layout->addWidget(search_);
  layout->addWidget(no_match_);
  layout->addWidget(list_, 1);

  // One click opens a chat (it only selected one, bug 10); Enter too.
  connect(list_, &QListWidget::itemClicked, this, [this](QListWidgetItem* item) {
    emit openRequested(item->data(Qt::UserRole).toString());
  });
  connect(list_, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
    emit openRequested(item->data(Qt::UserRole).toString());
  });
  // A title edited in place (F2, or Rename): the row's text is the new title.
  connect(list_, &QListWidget::itemChanged, this, [this](QListWidgetItem* item) {
    const QString id = item->data(Qt::UserRole).toString(), title = item->text().trimmed();
    // Queued: the rename refills the list, and this row's editor is still finishing with it.
    if (!title.isEmpty() && title != title_of_.value(id))
      QMetaObject::invokeMethod(this, [this, id, title] { emit renameRequested(id, title); }, Qt::QueuedConnection);
  });
  // The menu acts on the row it was opened on; afterwards the open chat's row is the selected one again.
  list_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(list_, &QListWidget::customContextMenuRequested, this, &ChatListPanel::show_menu);
  auto add_action = [this](const char* name, const QString& text, QKeySequence key, auto&& then) {
    auto* action = new QAction(text, list_);
    action->setObjectName(name);
    if (!key.isEmpty()) {
      action->setShortcut(key);
      action->setShortcutContext(Qt::WidgetShortcut);
    }
    list_->addAction(action);  // its key, on the list
    actions_ << action;
    connect(action, &QAction::triggered, this, then);
  };
  add_action("rename_chat", "Rename chat", QKeySequence(Qt::Key_F2), [this] {
    if (QListWidgetItem* item = row_of(target_id())) {
      list_->setCurrentItem(item);  // the row being edited
      const QSignalBlocker quiet(list_);  // the row shows the title as stored while it is edited
      item->setText(title_of_.value(item->data(Qt::UserRole).toString()));
      list_->editItem(item);
    }
  });
  add_action("export_chat", "Export as Markdown…", {}, [this] {
    if (const QString id = target_id(); !id.isEmpty()) emit exportRequested(id);
  });
  add_action("delete_chat", "Delete chat", QKeySequence::Delete, [this] {
    if (const QString id = target_id(); !id.isEmpty()) emit deleteRequested(id);
  });
  connect(search_, &QLineEdit::textChanged, this, &ChatListPanel::apply_search);
  // An edit ended without a rename (Esc): the open chat's row is selected again.
  connect(list_->itemDelegate(), &QAbstractItemDelegate::closeEditor, this, [this] { set_open(open_id_); },
          Qt::QueuedConnection);
}

QString ChatListPanel::selected_id() const {
  const QListWidgetItem* item = list_->currentItem();
  return item ? item->data(Qt::UserRole).toString() : QString();
}

QString ChatListPanel::target_id() const { return menu_id_.isEmpty() ? selected_id() : menu_id_; }

void ChatListPanel::show_menu(const QPoint& at) {
  const QListWidgetItem* item = list_->itemAt(at);
  if (!item) return;
  menu_id_ = item->data(Qt::UserRole).toString();
  QMenu menu(this);
  menu.addActions(actions_);
  const QAction* chosen = menu.exec(list_->viewport()->mapToGlobal(at));
  menu_id_.clear();
  if (!chosen || chosen->objectName() != "rename_chat") set_open(open_id_);  // a rename's editor ends it (below)
}

QListWidgetItem* ChatListPanel::row_of(const QString& id) const {
  for (int i = 0; i < list_->count(); ++i)
    if (list_->item(i)->data(Qt::UserRole).toString() == id) return list_->item(i);
  return nullptr;
}

void ChatListPanel::set_open(const QString& id) {
  open_id_ = id;
  const QSignalBlocker quiet(list_);
  list_->setCurrentItem(row_of(id));
}

void ChatListPanel::set_chats(const QList<ChatListing>& chats) {
  const QSignalBlocker quiet(list_);  // filling the rows is no rename
  list_->clear();
  text_of_.clear();
  title_of_.clear();
  // Repeated titles are told apart by a number, oldest 1 ("What shapes do you see?" four times was four alike rows).
  QHash<QString, int> count, seen;
  for (const ChatListing& l : chats) ++count[l.title];
  for (const ChatListing& l : chats) {
    const int n = count[l.title];
    const QString title = n > 1 ? QString("%1 (%2)").arg(l.title).arg(n - seen[l.title]++) : l.title;
    auto* item = new QListWidgetItem(title, list_);
    item->setData(Qt::UserRole, l.id);
    item->setFlags(item->flags() | Qt::ItemIsEditable);
    item->setToolTip(l.title + "\n" + l.updated.toLocalTime().toString());
    text_of_.insert(l.id, l.title.toLower() + "\n" + l.text);
    title_of_.insert(l.id, l.title);
  }
  set_open(open_id_);
  apply_search();
}

void ChatListPanel::set_search(const QString& text) { search_->setText(text); }

void ChatListPanel::apply_search() {
  const QStringList words = search_->text().toLower().split(' ', Qt::SkipEmptyParts);
  for (int i = 0; i < list_->count(); ++i) {
    QListWidgetItem* item = list_->item(i);
    const QString& text = text_of_[item->data(Qt::UserRole).toString()];
    item->setHidden(!std::all_of(words.begin(), words.end(), [&](const QString& w) { return text.contains(w); }));
  }
  no_match_->setVisible(!words.isEmpty() && shown_titles().isEmpty() && list_->count() > 0);
}

QStringList ChatListPanel::shown_titles() const {
  QStringList titles;
  for (int i = 0; i < list_->count(); ++i)
    if (!list_->item(i)->isHidden()) titles << list_->item(i)->text();
  return titles;
}

}  // namespace qvl::ui
