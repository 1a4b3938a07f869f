#pragma once
// The app's look: the desktop's own (the platform theme's palette, which follows a dark desktop where the platform
// says so), or a light or dark Fusion palette chosen in View ▸ Theme and kept in the settings.
#include <QString>
#include <QStringList>

namespace qvl::ui {

// "system", "light" or "dark"; anything else is "system".
void apply_theme(const QString& name);
QString current_theme();
inline const QStringList kThemes{"system", "light", "dark"};

}  // namespace qvl::ui
