#pragma once
// The app's look: the desktop's own (the platform theme's palette, which follows a dark desktop where the platform
// says so), or a light or dark Fusion palette chosen in View ▸ Theme and kept in the settings.
#include <QString>
#include <QStringList>

namespace qvl::ui {

// "system", "light" or "dark"; anything else is "system". "system" when nothing else was applied changes nothing.
void apply_theme(const QString& name);
// A readable warning or error colour for the palette in use (the fixed ones were 2:1 on the dark theme's window).
QString warning_colour();
QString error_colour();
bool dark_palette_in_use();  // the palette in use is a dark one (its window darker than mid grey)
inline const QStringList kThemes{"system", "light", "dark"};

}  // namespace qvl::ui
