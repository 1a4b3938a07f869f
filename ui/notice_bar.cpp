#include "ui/notice_bar.h"

#include "ui/theme.h"

#include <QApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolButton>
#include <QVBoxLayout>

namespace qvl::ui {

namespace {

// Word-wrapped text as tall as its lines at the width it has: a note that grew a line as the window narrowed once
// drew its last line over the chat below (the layout above the chat did not ask for the height for the width).
class WrappedLabel : public QLabel {
protected:
  void resizeEvent(QResizeEvent* event) override {
    QLabel::resizeEvent(event);
    setMinimumHeight(heightForWidth(width()));
  }
};

}  // namespace

NoticeBar::NoticeBar(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  error_ = add_row("error");
  note_ = add_row("note");
  restyle();
}

NoticeBar::Row NoticeBar::add_row(const QString& name) {
  auto* row = new QWidget;
  row->setObjectName(name + "_row");
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(8, 4, 8, 4);
  QLabel* text = new WrappedLabel;
  text->setObjectName(name);
  text->setWordWrap(true);
  text->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* close = new QToolButton;
  close->setObjectName(name + "_close");
  close->setText("✕");
  close->setToolTip("Close");
  close->setAutoRaise(true);
  layout->addWidget(text, 1);
  layout->addWidget(close, 0, Qt::AlignTop);
  row->hide();
  static_cast<QVBoxLayout*>(this->layout())->addWidget(row);
  if (name == "error") {
    connect(close, &QToolButton::clicked, row, &QWidget::hide);
  } else {
    // A passing note closed: the standing one comes back. The standing note closed: gone until the next is set.
    connect(close, &QToolButton::clicked, this, [this, text] {
      if (text->text() == standing_note_) standing_note_.clear();
      end_note(text->text());
      emit noteClosed();
    });
  }
  return {row, text};
}

void NoticeBar::show_row(const Row& row, const QString& text) {
  restyle();  // the look may have changed since (the theme is applied after the window is built)
  row.text->setText(text);
  row.text->setMinimumHeight(row.text->heightForWidth(row.text->width()));
  row.row->show();
}

void NoticeBar::show_error(const QString& text) { show_row(error_, text); }
void NoticeBar::hide_error() { error_.row->hide(); }

void NoticeBar::set_standing_note(const QString& text) {
  standing_note_ = text;
  if (text.isEmpty()) note_.row->hide();
  else show_row(note_, text);
}

void NoticeBar::show_note(const QString& text) { show_row(note_, text); }

void NoticeBar::end_note(const QString& text) {
  if (note() == text) show_standing_note();
}

void NoticeBar::end_passing_note() {
  if (!note().isEmpty() && note() != standing_note_) show_standing_note();
}

void NoticeBar::show_standing_note() {
  if (standing_note_.isEmpty()) note_.row->hide();
  else show_row(note_, standing_note_);
}

QString NoticeBar::error() const { return error_.row->isVisibleTo(this) ? error_.text->text() : QString(); }
QString NoticeBar::note() const { return note_.row->isVisibleTo(this) ? note_.text->text() : QString(); }

// Pale on a light palette, deep on a dark one (text readable on both); an error red, a note blue.
void NoticeBar::restyle() {
  const bool dark = dark_palette_in_use();
  const auto style = [](const Row& row, const char* background, const char* colour) {
    row.row->setStyleSheet(QString("#%1 { background: %2; } #%1 QLabel { color: %3; }")
                               .arg(row.row->objectName(), background, colour));
  };
  style(error_, dark ? "#4a2426" : "#fde7e7", dark ? "#f6d7d7" : "#3a0d0d");
  style(note_, dark ? "#1f2f4a" : "#e8f0fe", dark ? "#dce7fb" : "#14243d");
}

}  // namespace qvl::ui
