#pragma once
// The banners above the conversation: errors and notes inside the window, never a modal box that blocks the app.
// Two rows, so that an error does not take the place of a note (an error once replaced the demo model's note, which
// then was gone): the error row goes when the user moves on; the note row holds a standing note (the demo model's)
// or, over it for a while, a passing one (an edit in progress, an export done).
#include <QWidget>

class QLabel;

namespace qvl::ui {

class NoticeBar : public QWidget {
  Q_OBJECT
public:
  explicit NoticeBar(QWidget* parent = nullptr);

  void show_error(const QString& text);
  void hide_error();
  // The note shown whenever no passing note is (empty: none); shown now.
  void set_standing_note(const QString& text);
  void show_note(const QString& text);  // a passing note, until end_note or the user closes it
  void end_note(const QString& text);   // if `text` is the note showing: the standing note comes back
  void end_passing_note();              // whichever passing note shows (the user moved on): the standing one back
  // What each row shows (empty when hidden).
  QString error() const;
  QString note() const;
  void restyle();  // the colours for the palette in use (a theme change)

signals:
  void noteClosed();  // the user closed a note (an edit in progress is cancelled)

private:
  struct Row {
    QWidget* row;
    QLabel* text;
  };
  Row add_row(const QString& name);
  void show_standing_note();
  void show_row(const Row& row, const QString& text);
  Row error_, note_;
  QString standing_note_;
};

}  // namespace qvl::ui
