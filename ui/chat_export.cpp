#include "ui/chat_export.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHash>
#include <QRegularExpression>
#include <QSet>
#include <QUrl>

#include "io/atomic_file.h"

namespace qvl::ui {

namespace {

// `name`, or "stem (2).ext", "stem (3).ext"... : the first not in `taken` (two pictures of a chat may share a name).
QString unique_name(const QString& name, const QSet<QString>& taken) {
  if (!taken.contains(name)) return name;
  const QFileInfo f(name);
  const QString suffix = f.suffix().isEmpty() ? QString() : "." + f.suffix();
  for (int n = 2;; ++n)
    if (const QString candidate = QString("%1 (%2)%3").arg(f.completeBaseName()).arg(n).arg(suffix); !taken.contains(candidate))
      return candidate;
}

}  // namespace

QString suggested_export_name(const Conversation& chat) {
  QString name = (chat.title.isEmpty() ? chat.derived_title() : chat.title).simplified();
  name.replace(QRegularExpression(R"([/\\:*?"<>|\x00-\x1f])"), " ");
  name = name.simplified().left(80).trimmed();
  return (name.isEmpty() ? QString("chat") : name) + ".md";
}

QString export_chat_markdown(const Conversation& chat, QString path, QString* error) {
  if (QFileInfo(path).suffix().isEmpty()) path += ".md";
  const QFileInfo target(path);
  const QString folder_name = target.completeBaseName() + " pictures";
  const QDir folder(target.absolutePath() + "/" + folder_name);
  bool made_folder = false;
  struct Copy {
    QString partial, final_path;
  };
  QList<Copy> copies;  // written beside their final names; put in place only once the Markdown is
  QHash<QString, QString> links;  // picture path -> its relative link (empty: the picture is gone)
  QSet<QString> taken;
  auto undo = [&] {
    for (const Copy& c : copies) QFile::remove(c.partial);
    if (made_folder) QDir().rmdir(folder.path());
  };
  for (const ChatTurn& turn : chat.turns)
    for (const QString& picture : turn.images) {
      if (links.contains(picture)) continue;
      // A picture no longer there (a chat from before attachments were kept) is named in the text, not fatal.
      if (!QFileInfo::exists(picture)) {
        links[picture] = QString();
        continue;
      }
      if (!folder.exists()) {
        if (!QDir().mkpath(folder.path())) {
          *error = "cannot make the folder " + folder.path() + " for the chat's pictures";
          return {};
        }
        made_folder = true;
      }
      const QString name = unique_name(QFileInfo(picture).fileName(), taken);
      const Copy copy{folder.filePath(name) + ".part", folder.filePath(name)};
      QFile::remove(copy.partial);
      if (!QFile::copy(picture, copy.partial)) {
        *error = "cannot copy the picture " + picture + " to " + folder.path() + " (is the disk full?)";
        undo();
        return {};
      }
      taken.insert(name);
      copies << copy;
      links[picture] = QString::fromUtf8(QUrl::toPercentEncoding(folder_name) + "/" + QUrl::toPercentEncoding(name));
    }
  try {  // all or nothing: a full disk leaves no half-written export in place, and the folder's files untouched
    write_file_atomically(path.toStdString(), chat.to_markdown([&](const QString& picture) {
      const QString link = links.value(picture);
      return link.isEmpty() ? QString("missing:") + QUrl::toPercentEncoding(QFileInfo(picture).fileName()) : link;
    }).toStdString());
  } catch (const std::exception& e) {
    *error = QString::fromStdString(e.what());
    undo();
    return {};
  }
  // Exported again over an earlier export (the save dialog asked about the file): its pictures of the same names
  // are replaced; other files in the folder are left alone.
  for (const Copy& c : copies) {
    QFile::remove(c.final_path);
    QFile::rename(c.partial, c.final_path);
  }
  return path;
}

}  // namespace qvl::ui
