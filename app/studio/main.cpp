// qvl-studio: the desktop app.
#include <QApplication>
#include <QSettings>

#include "core/paths.h"
#include "qvl/version.h"
#include "ui/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("qvl");
  QApplication::setApplicationName("qvl-studio");
  QApplication::setApplicationVersion(QVL_VERSION);
  qvl::ui::MainWindow window;
  const QString last = QSettings().value("model/last").toString();
  window.openModel(last.isEmpty() ? QString::fromStdString(qvl::default_model_dir().string()) : last);
  window.show();
  return QApplication::exec();
}
