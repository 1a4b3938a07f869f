#pragma once
// Chats on disk: one JSON file per chat in a folder (the app data folder's "chats"), each written atomically
// (QSaveFile: a crash mid-write leaves the previous version), and the pictures of its turns kept beside them
// (pasted ones, and copies of attached files, so that renaming or deleting the original loses nothing).
#include <QHash>
#include <QImage>
#include <QList>
#include <QString>
#include <optional>

#include "ui/conversation.h"

namespace qvl::ui {

struct ChatListing {
  QString id, title;
  QDateTime updated;
  QString text;  // what was said, every turn's text, lowercased (for the search; made once per file change)
};

// Copies an attached picture into `store_dir`/attachments/<hash of its bytes>/<its file name> and returns that path
// (a copy already there is reused; a file already inside attachments/ is returned as it is); empty with the reason on
// failure. Touches only files: safe on a worker thread (the composer's image check calls it there).
QString keep_attachment(const QString& store_dir, const QString& path, QString* error);

// Writes a picture into `store_dir`/attachments/<hash of the file>.png (or .jpg) — or, given a `name` (without its
// suffix), <hash>/<name>.png, so that a copy made of a file keeps a name the user knows — and returns that path; empty
// with the reason on failure. Touches only files: safe on a worker thread (a picture scaled down for the model is
// saved there). PNG keeps a pasted picture exact; JPEG (quality 95) keeps a large photo scaled down small.
enum class PictureFormat { Png, Jpeg };
QString save_picture_attachment(const QString& store_dir, const QImage& image, QString* error,
                                PictureFormat format = PictureFormat::Png, const QString& name = {});

class ChatStore {
public:
  // `dir` empty: <AppDataLocation>/chats.
  explicit ChatStore(QString dir = {});
  const QString& dir() const { return dir_; }

  // Gives the chat an id if it has none, stamps `updated` (unless Keep: a rename is no new activity), and writes it;
  // false with the reason on failure.
  enum class Stamp { Now, Keep };
  bool save(Conversation& chat, QString* error, Stamp stamp = Stamp::Now);
  std::optional<Conversation> load(const QString& id, QString* error) const;
  bool remove(const QString& id);
  // Newest first. Unreadable files are listed with their file name as the title (load() then says why). A file is
  // parsed once and again only when its size or modification time changes: the list is refreshed after every
  // answer, and a store of 1,000 chats was parsed whole each time.
  QList<ChatListing> list() const;
  // Writes a pasted image as PNG under attachments/ (named by its content) and returns the path.
  QString save_attachment(const QImage& image, QString* error) { return save_picture_attachment(dir_, image, error); }

private:
  QString path_of(const QString& id) const;
  QString dir_;
  struct CachedListing {
    qint64 size = -1;
    QDateTime modified;
    ChatListing listing;
  };
  mutable QHash<QString, CachedListing> listed_;  // by file name
};

}  // namespace qvl::ui
