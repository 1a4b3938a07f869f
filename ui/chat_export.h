#pragma once
// A chat exported as Markdown that stands on its own: the pictures copied into a folder beside the file ("<name>
// pictures/") and linked relatively (an export once linked them inside the app's data folder, so the file lost its
// pictures when moved or shared). Touches only files.
#include <QString>

#include "ui/conversation.h"

namespace qvl::ui {

// `path` without a suffix gets ".md". The pictures are copied first; the Markdown is written atomically last, and on
// any failure what this call created is removed. Returns the path written, or empty with the reason in *error.
QString export_chat_markdown(const Conversation& chat, QString path, QString* error);

// A file name for the chat's export: its title without characters file systems refuse, ".md" added.
QString suggested_export_name(const Conversation& chat);

}  // namespace qvl::ui
