#include "ui/chat_model.h"

#include <QUuid>

namespace qvl::ui {

ChatModel::ChatModel(QObject* parent) : QAbstractListModel(parent), engine_key_(QUuid::createUuid().toString()) {}

int ChatModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(chat_.turns.size()); }

QVariant ChatModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= chat_.turns.size()) return {};
  const ChatTurn& t = chat_.turns[index.row()];
  switch (role) {
    case Qt::DisplayRole: return t.text;
    case RoleRole: return t.role;
    case ImagesRole: return t.images;
    case StatsRole: return t.stats;
    case FailedRole: return t.failed;
    case StreamingRole: return streaming_ && index.row() == chat_.turns.size() - 1;
    default: return {};
  }
}

void ChatModel::set_conversation(Conversation chat) {
  beginResetModel();
  chat_ = std::move(chat);
  engine_key_ = QUuid::createUuid().toString();
  streaming_ = false;
  endResetModel();
}

void ChatModel::append(const ChatTurn& turn) {
  const int row = int(chat_.turns.size());
  beginInsertRows({}, row, row);
  chat_.turns.append(turn);
  endInsertRows();
}

void ChatModel::changed_last(const QList<int>& roles) {
  if (chat_.turns.isEmpty()) return;
  const QModelIndex last = index(int(chat_.turns.size()) - 1);
  emit dataChanged(last, last, roles);
}

void ChatModel::append_text(const QString& text) {
  if (chat_.turns.isEmpty()) return;
  chat_.turns.last().text += text;
  changed_last({Qt::DisplayRole});
}

void ChatModel::finish_last(const QString& stats, bool failed, const QString& message) {
  if (chat_.turns.isEmpty()) return;
  ChatTurn& t = chat_.turns.last();
  t.stats = stats;
  t.failed = failed;
  if (failed) t.text = t.text.isEmpty() ? message : t.text + "\n\n" + message;
  streaming_ = false;
  changed_last({Qt::DisplayRole, StatsRole, FailedRole, StreamingRole});
}

void ChatModel::remove_last() {
  if (chat_.turns.isEmpty()) return;
  const int row = int(chat_.turns.size()) - 1;
  beginRemoveRows({}, row, row);
  chat_.turns.removeLast();
  endRemoveRows();
}

void ChatModel::truncate(int turns) {
  if (turns < 0 || turns >= chat_.turns.size()) return;
  beginRemoveRows({}, turns, int(chat_.turns.size()) - 1);
  chat_.turns.resize(turns);
  endRemoveRows();
}

void ChatModel::set_streaming(bool on) {
  streaming_ = on;
  changed_last({StreamingRole});
}

}  // namespace qvl::ui
