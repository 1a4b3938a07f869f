#include "ui/theme.h"

#include <QApplication>
#include <QPalette>
#include <QStyle>
#include <QStyleFactory>

namespace qvl::ui {

namespace {

struct Desktop {  // what the platform gave, before any theme was applied
  QString style;
  QPalette palette;
};
Desktop& desktop() {
  static Desktop d{QApplication::style()->name(), QApplication::palette()};
  return d;
}
QString& chosen() {
  static QString name = "system";
  return name;
}

QPalette dark_palette() {
  QPalette p;
  const QColor window(37, 39, 43), base(28, 30, 33), text(226, 228, 232), mid(70, 73, 80), accent(66, 133, 244);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, QColor(45, 48, 53));
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(150, 153, 160));
  p.setColor(QPalette::Mid, mid);
  p.setColor(QPalette::Dark, QColor(20, 21, 24));
  p.setColor(QPalette::Highlight, accent);
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(120, 170, 255));
  p.setColor(QPalette::LinkVisited, QColor(170, 140, 255));
  p.setColor(QPalette::Light, QColor(60, 63, 69));
  p.setColor(QPalette::Midlight, QColor(50, 53, 58));
  p.setColor(QPalette::Shadow, QColor(10, 10, 12));
  p.setColor(QPalette::BrightText, Qt::white);
  for (const auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, QColor(120, 123, 130));
  return p;
}

}  // namespace

bool dark_palette_in_use() { return QApplication::palette().color(QPalette::Window).lightness() < 128; }

void apply_theme(const QString& name) {
  const Desktop& d = desktop();  // remembered before the first change
  const QString theme = kThemes.contains(name) ? name : "system";
  if (theme == chosen()) return;  // at start, "system": the desktop's look as it is
  chosen() = theme;
  if (theme == "system") {
    QApplication::setStyle(QStyleFactory::create(d.style));
    QApplication::setPalette(d.palette);
    return;
  }
  QApplication::setStyle(QStyleFactory::create("Fusion"));
  QApplication::setPalette(theme == "dark" ? dark_palette() : QApplication::style()->standardPalette());
}

QString warning_colour() { return dark_palette_in_use() ? "#f0b45a" : "#a05a00"; }
QString error_colour() { return dark_palette_in_use() ? "#ff8a8a" : "#b00020"; }

}  // namespace qvl::ui
