#pragma once
// Where a file dialog opens: the folder the user last took files from or wrote them to (a setting), at first a
// standard one; a folder that no longer exists gives the home folder (a missing one ended up as the dialog's file
// name, and the dialogs once opened in the app's working directory).
#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QStandardPaths>

namespace qvl::ui {

inline QString existing_or_home(const QString& folder) {
  return !folder.isEmpty() && QDir(folder).exists() ? folder : QDir::homePath();  // QDir("") is the working directory
}

inline QString dialog_folder(const QString& key, QStandardPaths::StandardLocation first) {
  return existing_or_home(QSettings().value(key, QStandardPaths::writableLocation(first)).toString());
}

// After the dialog: the chosen file's folder, for the next time (nothing when it was cancelled).
inline void remember_dialog_folder(const QString& key, const QString& chosen_file) {
  if (!chosen_file.isEmpty()) QSettings().setValue(key, QFileInfo(chosen_file).absolutePath());
}

}  // namespace qvl::ui
