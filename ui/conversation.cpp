#include "ui/conversation.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QUrl>

namespace qvl::ui {

QString Conversation::derived_title() const {
  for (const auto& t : turns)
    if (t.role == "user" && !t.text.trimmed().isEmpty()) {
      const QString line = t.text.trimmed().section('\n', 0, 0);
      return line.size() > 60 ? line.left(57) + "…" : line;
    }
  return "New chat";
}

QString Conversation::to_markdown(const std::function<QString(const QString& picture)>& link) const {
  QString md = "# " + (title.isEmpty() ? derived_title() : title) + "\n";
  if (!system_prompt.isEmpty()) md += "\n*System prompt:* " + system_prompt + "\n";
  for (const ChatTurn& t : turns) {
    md += "\n## " + QString(t.role == "user" ? "You" : "Assistant") + "\n\n";
    for (const QString& path : t.images)
      md += "![" + QFileInfo(path).fileName() + "](" +
            (link ? link(path) : QUrl::fromLocalFile(path).toString(QUrl::FullyEncoded)) + ")\n\n";
    md += (t.failed ? "*Failed:* " : "") + t.text + "\n";
    if (!t.stats.isEmpty()) md += "\n*" + t.stats + "*\n";
  }
  return md;
}

QJsonObject Conversation::to_json() const {
  QJsonArray list;
  for (const auto& t : turns) {
    QJsonObject o{{"role", t.role}, {"text", t.text}};
    if (!t.images.isEmpty()) o["images"] = QJsonArray::fromStringList(t.images);
    if (!t.stats.isEmpty()) o["stats"] = t.stats;
    if (t.failed) o["failed"] = true;
    list.append(o);
  }
  QJsonObject out{{"format", "qvl-chat-1"},     {"id", id},
                  {"title", title},             {"system_prompt", system_prompt},
                  {"model", model_folder},      {"updated", updated.toString(Qt::ISODateWithMs)},
                  {"turns", list}};
  if (!settings.isEmpty()) out["settings"] = settings;
  return out;
}

std::optional<Conversation> Conversation::from_json(const QJsonObject& json, QString* error) {
  auto bad = [&](const QString& why) {
    if (error) *error = why;
    return std::nullopt;
  };
  if (json.value("format").toString() != "qvl-chat-1") return bad("not a qvl chat (\"format\" is not \"qvl-chat-1\")");
  if (!json.value("turns").isArray()) return bad("\"turns\" is missing or not a list");
  Conversation c;
  c.id = json.value("id").toString();
  c.title = json.value("title").toString();
  c.system_prompt = json.value("system_prompt").toString();
  c.model_folder = json.value("model").toString();
  c.settings = json.value("settings").toObject();  // absent in older chats: the defaults apply
  c.updated = QDateTime::fromString(json.value("updated").toString(), Qt::ISODateWithMs);
  const QJsonArray turns = json.value("turns").toArray();
  for (qsizetype i = 0; i < turns.size(); ++i) {
    const QJsonObject o = turns[i].toObject();
    const QString role = o.value("role").toString();
    if (role != "user" && role != "assistant") return bad(QString("turn %1 has role \"%2\"").arg(i).arg(role));
    ChatTurn t{role, o.value("text").toString(), {}, o.value("stats").toString(), o.value("failed").toBool()};
    for (const auto& v : o.value("images").toArray()) t.images << v.toString();
    c.turns.append(t);
  }
  return c;
}

}  // namespace qvl::ui
