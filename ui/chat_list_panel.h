#pragma once
// The Chats dock: the saved chats newest first (repeated titles numbered, oldest 1; long titles elided), a search
// over titles and what was said, and what a chat app does with a chat: open (one click or Enter), rename (F2 or the
// context menu; the title edited in place), export as Markdown, delete (the Delete key or the context menu). The
// window does the work (MainWindow: the store, the open chat); this widget only asks.
#include <QWidget>

#include "ui/chat_store.h"

class QLabel;
class QLineEdit;
class QListWidget;
class QListWidgetItem;

namespace qvl::ui {

class ChatListPanel : public QWidget {
  Q_OBJECT
public:
  explicit ChatListPanel(QWidget* parent = nullptr);
  void set_chats(const QList<ChatListing>& chats);  // the search stays applied
  void set_search(const QString& text);
  // The chat the window shows: its row is the one selected (a right-clicked row once stayed selected while another
  // chat was shown).
  void set_open(const QString& id);
  QStringList shown_titles() const;  // the rows the search leaves, top to bottom
  QString selected_id() const;       // the selected row's chat

signals:
  void openRequested(const QString& id);
  void deleteRequested(const QString& id);
  void renameRequested(const QString& id, const QString& title);
  void exportRequested(const QString& id);

private:
  void apply_search();
  QString target_id() const;  // the row a context menu is open for, else the current row
  QListWidgetItem* row_of(const QString& id) const;
  void show_menu(const QPoint& at);

  QLineEdit* search_;
  QListWidget* list_;
  QLabel* no_match_;
  QList<QAction*> actions_;  // rename, export, delete: in the context menu, and their keys on the list
  QString open_id_, menu_id_;
  QHash<QString, QString> text_of_;  // by id: the chat's words, lowercased, for the search
  QHash<QString, QString> title_of_;  // by id: the title as stored (the row may add a number)
};

}  // namespace qvl::ui
