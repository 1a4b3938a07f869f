#include "ui/chat_store.h"

#include <QBuffer>
#include <QCryptographicHash>
#include <QDir>
#include <QRandomGenerator>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>
#include <QStandardPaths>
#include <QUuid>
#include <algorithm>

namespace qvl::ui {

ChatStore::ChatStore(QString dir)
    : dir_(dir.isEmpty() ? QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/chats" : std::move(dir)) {}

QString ChatStore::path_of(const QString& id) const { return dir_ + "/" + id + ".json"; }

namespace {

// QSaveFile, all or nothing: a short write (a full disk returns one without an error, and commit() then succeeded with
// the file cut short: a chat lost its end) cancels the save, and the previous file stays.
bool write_whole(const QString& path, const QByteArray& bytes, QString* error) {
  QSaveFile file(path);
  if (file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size() && file.commit()) return true;
  const QString why = file.error() != QFileDevice::NoError ? file.errorString() : QString("the disk is full");
  if (file.isOpen()) file.cancelWriting();  // the temporary file goes; the old file was never touched
  if (error) *error = "cannot write " + path + ": " + why;
  return false;
}

}  // namespace

bool ChatStore::save(Conversation& chat, QString* error, Stamp stamp) {
  if (!QDir().mkpath(dir_)) {
    if (error) *error = "cannot create the folder " + dir_;
    return false;
  }
  if (chat.id.isEmpty()) chat.id = QUuid::createUuid().toString(QUuid::WithoutBraces);
  if (chat.title.isEmpty()) chat.title = chat.derived_title();
  if (stamp == Stamp::Now || !chat.updated.isValid()) chat.updated = QDateTime::currentDateTimeUtc();
  return write_whole(path_of(chat.id), QJsonDocument(chat.to_json()).toJson(), error);
}

std::optional<Conversation> ChatStore::load(const QString& id, QString* error) const {
  QFile file(path_of(id));
  if (!file.open(QIODevice::ReadOnly)) {
    if (error) *error = "cannot read " + file.fileName() + ": " + file.errorString();
    return std::nullopt;
  }
  QJsonParseError parse;
  const QJsonDocument doc = QJsonDocument::fromJson(file.readAll(), &parse);
  if (!doc.isObject()) {
    if (error) *error = file.fileName() + ": " + (parse.error ? parse.errorString() : QString("not a JSON object"));
    return std::nullopt;
  }
  QString why;
  auto chat = Conversation::from_json(doc.object(), &why);
  if (!chat && error) *error = file.fileName() + ": " + why;
  if (chat) chat->id = id;
  return chat;
}

bool ChatStore::remove(const QString& id) { return QFile::remove(path_of(id)); }

QList<ChatListing> ChatStore::list() const {
  QList<ChatListing> out;
  const QDir dir(dir_);
  QHash<QString, CachedListing> seen;
  for (const QFileInfo& f : dir.entryInfoList({"*.json"}, QDir::Files)) {
    const auto cached = listed_.constFind(f.fileName());
    if (cached != listed_.cend() && cached->size == f.size() && cached->modified == f.lastModified()) {
      seen.insert(f.fileName(), *cached);
      out.append(cached->listing);
      continue;
    }
    ChatListing l{f.completeBaseName(), f.completeBaseName(), f.lastModified().toUTC()};
    QFile file(f.filePath());
    if (file.open(QIODevice::ReadOnly)) {
      const QJsonObject o = QJsonDocument::fromJson(file.readAll()).object();
      if (!o.value("title").toString().isEmpty()) l.title = o.value("title").toString();
      const QDateTime updated = QDateTime::fromString(o.value("updated").toString(), Qt::ISODateWithMs);
      if (updated.isValid()) l.updated = updated;
      QStringList said;
      for (const QJsonValue& turn : o.value("turns").toArray()) said << turn.toObject().value("text").toString();
      l.text = said.join('\n').toLower();
    }
    seen.insert(f.fileName(), {f.size(), f.lastModified(), l});
    out.append(l);
  }
  listed_ = std::move(seen);  // removed chats leave the cache
  std::sort(out.begin(), out.end(), [](const ChatListing& a, const ChatListing& b) { return a.updated > b.updated; });
  return out;
}

QString keep_attachment(const QString& store_dir, const QString& path, QString* error) {
  const QString folder = QDir(store_dir + "/attachments").absolutePath();
  const QFileInfo source(path);
  if (source.absoluteFilePath().startsWith(folder + "/")) return path;
  QFile file(path);
  QCryptographicHash hash(QCryptographicHash::Sha1);
  if (!file.open(QIODevice::ReadOnly) || !hash.addData(&file)) {
    if (error) *error = "cannot read " + path + ": " + file.errorString();
    return {};
  }
  const QString kept_dir = folder + "/" + hash.result().toHex().left(16);
  const QString kept = kept_dir + "/" + source.fileName();
  if (QFileInfo::exists(kept)) return kept;
  // A partial file of this call's own: the same picture attached twice at once is kept by two workers (they shared
  // one ".part" name, and one of the two was refused as if the disk were full).
  const QString partial = kept + QString(".part-%1").arg(QRandomGenerator::global()->generate64(), 16, 16, QChar('0'));
  for (const QFileInfo& stale : QDir(kept_dir).entryInfoList({source.fileName() + ".part-*"}, QDir::Files))
    if (stale.lastModified().secsTo(QDateTime::currentDateTime()) > 600) QFile::remove(stale.filePath());  // a crash's
  const bool copied = QDir().mkpath(kept_dir) && QFile::copy(path, partial);
  if (copied && (QFile::rename(partial, kept) || QFileInfo::exists(kept))) {  // renamed, or the other worker's is there
    QFile::remove(partial);
    return kept;
  }
  QFile::remove(partial);
  if (error) *error = "cannot keep a copy of " + path + " in " + kept_dir + " (is the disk full?)";
  return {};
}

QString save_picture_attachment(const QString& store_dir, const QImage& image, QString* error, PictureFormat format,
                                const QString& name) {
  const bool jpeg = format == PictureFormat::Jpeg;
  QByteArray bytes;
  {
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    image.save(&buffer, jpeg ? "JPG" : "PNG", jpeg ? 95 : -1);
  }
  const QString hash = QCryptographicHash::hash(bytes, QCryptographicHash::Sha1).toHex().left(16);
  const QString folder = store_dir + "/attachments" + (name.isEmpty() ? QString() : "/" + hash);
  QDir().mkpath(folder);
  const QString path = folder + "/" + (name.isEmpty() ? hash : name) + (jpeg ? ".jpg" : ".png");
  if (bytes.isEmpty() || !write_whole(path, bytes, error)) {
    if (error && error->isEmpty()) *error = "cannot write the picture to " + path;
    return {};
  }
  return path;
}

}  // namespace qvl::ui
