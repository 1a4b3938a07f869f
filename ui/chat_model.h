#pragma once
// The transcript of one chat as a list model: a row per turn. The assistant's answer grows in place while it
// streams (one dataChanged per coalesced piece).
#include <QAbstractListModel>

#include "ui/conversation.h"

namespace qvl::ui {

class ChatModel : public QAbstractListModel {
  Q_OBJECT
public:
  enum Roles { RoleRole = Qt::UserRole + 1, ImagesRole, StatsRole, StreamingRole, FailedRole };
  explicit ChatModel(QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;

  const Conversation& conversation() const { return chat_; }
  Conversation& conversation_for_saving() { return chat_; }  // id, title and timestamps are set by the store
  void set_conversation(Conversation chat);
  // The name the engine keeps this chat's keys and values under (GenerateRequest::conversation_id): new for every
  // chat set, so a follow-up prefills only its new tokens and another chat never reuses this one's.
  const QString& engine_key() const { return engine_key_; }
  void append(const ChatTurn& turn);
  void append_text(const QString& text);  // to the last turn (the streaming answer)
  void finish_last(const QString& stats, bool failed = false, const QString& message = {});
  void remove_last();
  void truncate(int turns);  // keeps the first `turns` (an earlier question edited: what followed it goes)
  bool streaming() const { return streaming_; }
  void set_streaming(bool on);

private:
  void changed_last(const QList<int>& roles);
  Conversation chat_;
  QString engine_key_;
  bool streaming_ = false;
};

}  // namespace qvl::ui
