#pragma once
// A chat as the app keeps it: turns with their text, image files and answer statistics, and its JSON form.
#include <QDateTime>
#include <QJsonObject>
#include <QList>
#include <QString>
#include <QStringList>
#include <functional>
#include <optional>

namespace qvl::ui {

struct ChatTurn {
  QString role;         // "user" or "assistant"
  QString text;
  QStringList images;   // absolute paths (user turns)
  QString stats;        // "24 tokens · 3.1 s · 7.8 tokens/s · cpu" (assistant turns)
  bool failed = false;  // the answer ended with an error; text holds the message
};

struct Conversation {
  QString id;  // file name stem; made when first saved
  QString title, system_prompt, model_folder;
  QJsonObject settings;  // the generation settings of its last question (GenerationSettings::chat_settings)
  QDateTime updated;
  QList<ChatTurn> turns;

  // The first words of the first user turn.
  QString derived_title() const;
  QJsonObject to_json() const;
  // The chat as Markdown: its title, each turn under who said it, pictures as links (`link` gives each picture's;
  // by default its file's URL), answers' stats.
  QString to_markdown(const std::function<QString(const QString& picture)>& link = {}) const;
  // Throws nothing: a malformed file gives nullopt and the reason in *error.
  static std::optional<Conversation> from_json(const QJsonObject& json, QString* error);
};

}  // namespace qvl::ui
