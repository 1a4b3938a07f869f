// qvl-studio: the desktop app. With --prompt it also sends a first message (and --screenshot saves the window
// while the answer streams), which is how tools/screenshot-studio makes the README's picture.
#include <QApplication>
#include <QCommandLineParser>
#include <QAction>
#include <QDockWidget>
#include <QScreen>
#include <QSettings>
#include <QTimer>
#include <cstdio>

#include "core/paths.h"
#include "qvl/version.h"
#include "ui/composer.h"
#include "ui/engine_controller.h"
#include "ui/main_window.h"
#include "ui/theme.h"

namespace {

struct StudioOptions {
  QCommandLineOption model{{"m", "model"}, "Model folder (default: the last one, or the embedded demo model).", "DIR"};
  QCommandLineOption prompt{"prompt", "Send this message once the model is loaded.", "TEXT"};
  QCommandLineOption image{"image", "Attach this image to --prompt (repeatable).", "PATH"};
  QCommandLineOption shot{"screenshot", "Save the window as PNG while the answer streams, then quit.", "FILE"};
  QCommandLineOption shot_tokens{"screenshot-at-tokens", "Tokens into the answer to take it (default 40).", "N", "40"};
  QCommandLineOption raise_dock{"raise-dock", "Bring a dock to the front of its tabs (e.g. attention, pool).", "NAME"};
  QCommandLineOption theme{"theme", "Use this look from now on: system, light or dark (View ▸ Theme).", "NAME"};
  QCommandLineOption size{"window-size", "Open the window at this size, e.g. 1920x1080.", "WxH"};
};

QList<QCommandLineOption> listed(const StudioOptions& o) {
  return {o.model, o.prompt, o.image, o.shot, o.shot_tokens, o.raise_dock, o.theme, o.size};
}

void describe(QCommandLineParser& cli, const StudioOptions& o) {
  QCoreApplication::setOrganizationName("qvl");
  QCoreApplication::setApplicationName("qvl-studio");
  QCoreApplication::setApplicationVersion(QVL_VERSION);
  cli.setApplicationDescription("Chat about images with a Qwen3-VL model, and watch the GPU while it answers.");
  cli.addHelpOption();
  cli.addVersionOption();
  cli.addOptions(listed(o));
}

// --help and --version are answered without a display: QApplication needs one, and aborted without it. Parsed as
// the real parser will (an option's value "-v" is no --version).
bool asks_only_to_print(int argc, char** argv, const StudioOptions& o) {
  QCommandLineParser cli;
  cli.addOptions(listed(o));
  const QCommandLineOption help({"h", "help", "?", "help-all"}, ""), version({"v", "version"}, "");
  cli.addOptions({help, version});
  QStringList arguments;
  for (int i = 0; i < argc; ++i) arguments << QString::fromLocal8Bit(argv[i]);
  return cli.parse(arguments) && (cli.isSet(help) || cli.isSet(version));
}

}  // namespace

int main(int argc, char** argv) {
  const StudioOptions o;
  if (asks_only_to_print(argc, argv, o)) {
    QCoreApplication app(argc, argv);
    QCommandLineParser cli;
    describe(cli, o);
    cli.process(app);  // prints and exits
  }
  QApplication app(argc, argv);
  QCommandLineParser cli;
  describe(cli, o);
  app.setProperty("qvl_git_revision", QVL_GIT_REVISION);  // for the About box (ui/ has no build header)
  QApplication::setWindowIcon(qvl::ui::MainWindow::app_icon());
  const auto& [model, prompt, image, shot, shot_tokens, raise_dock, theme, size] = o;
  cli.process(app);
  if (cli.isSet(theme)) {
    if (!qvl::ui::kThemes.contains(cli.value(theme))) {
      std::fprintf(stderr, "qvl-studio: --theme takes %s, not \"%s\"\n", qPrintable(qvl::ui::kThemes.join(", ")),
                   qPrintable(cli.value(theme)));
      return 2;
    }
    QSettings().setValue("view/theme", cli.value(theme));  // the window applies it, and its menu shows it
  }

  bool tokens_ok = false;
  const int shot_at = cli.value(shot_tokens).toInt(&tokens_ok);
  if (!tokens_ok || shot_at < 0 || shot_at > 1000000) {
    std::fprintf(stderr, "qvl-studio: --screenshot-at-tokens takes 0 to 1000000, not \"%s\"\n",
                 qPrintable(cli.value(shot_tokens)));
    return 2;
  }

  qvl::ui::MainWindow window;
  if (cli.isSet(raise_dock) && !window.findChild<QDockWidget*>(cli.value(raise_dock) + "_dock")) {
    QStringList docks;
    for (const auto* dock : window.findChildren<QDockWidget*>())
      if (dock->objectName().endsWith("_dock")) docks << dock->objectName().chopped(5);
    docks.sort();
    std::fprintf(stderr, "qvl-studio: --raise-dock takes %s, not \"%s\"\n", qPrintable(docks.join(", ")),
                 qPrintable(cli.value(raise_dock)));
    return 2;
  }
  if (cli.isSet(size)) {
    const QStringList wh = cli.value(size).split('x');
    const int w = wh.value(0).toInt(), h = wh.size() == 2 ? wh.value(1).toInt() : 0;
    if (w < 320 || h < 240 || w > 16384 || h > 16384) {
      std::fprintf(stderr, "qvl-studio: --window-size takes WIDTHxHEIGHT (320x240 to 16384x16384), not \"%s\"\n",
                   qPrintable(cli.value(size)));
      return 2;
    }
    window.resize(w, h);
  }
  const QString last = QSettings().value("model/last").toString();
  const QString folder = cli.isSet(model) ? cli.value(model)
                         : last.isEmpty() ? QString::fromStdString(qvl::default_model_dir().string())
                                          : last;
  window.show();
  window.openModel(folder);
  if (cli.isSet(raise_dock))
    if (auto* dock = window.findChild<QDockWidget*>(cli.value(raise_dock) + "_dock")) {
      // The performance panel opened as the user would (it starts collapsed on the CPU).
      if (auto* panel = window.findChild<QAction*>("performance_panel"); panel && !panel->isChecked()) panel->trigger();
      dock->raise();
    }

  if (cli.isSet(prompt)) {
    auto& engine = window.engine();
    // A picture that cannot be attached stops the question (it was once sent without it, the reason gone).
    QObject::connect(&window.composer(), &qvl::ui::Composer::attachmentRejected, &app, [](const QString& error) {
      qCritical("qvl-studio: %s", qPrintable(error));
      QApplication::exit(1);
    });
    QObject::connect(&engine, &qvl::ui::EngineController::modelLoaded, &window, [&] {
      window.newChat();  // a question from the command line is a chat of its own, not a turn of the last one
      window.composer().attach_files(cli.values(image));
      // Send once the attachments are checked (they are decoded off the GUI thread), and all of them were taken.
      auto* wait = new QTimer(&window);
      QObject::connect(wait, &QTimer::timeout, &window, [&, wait] {
        if (window.composer().pending_checks() > 0) return;
        wait->deleteLater();
        if (window.composer().image_paths().size() != cli.values(image).size()) {
          qCritical("qvl-studio: %lld of the %lld pictures given could not be attached (a picture over the pixel "
                    "limit is offered scaled down in the window, not from the command line)",
                    (long long)(cli.values(image).size() - window.composer().image_paths().size()),
                    (long long)cli.values(image).size());
          QApplication::exit(1);
          return;
        }
        window.sendPrompt(cli.value(prompt), window.composer().image_paths());
      });
      wait->start(20);
    }, Qt::SingleShotConnection);
    QObject::connect(&engine, &qvl::ui::EngineController::modelFailed, &app, [](const QString&, const QString& error) {
      qCritical("qvl-studio: %s", qPrintable(error));
      QApplication::exit(1);
    });
    if (cli.isSet(shot)) {
      const int at = shot_at;
      // What the screen shows (the Vulkan views are native windows a widget grab leaves blank), a moment after the
      // moment asked for, so that their newest frame has been presented.
      auto save = [&window, file = cli.value(shot)] {
        QTimer::singleShot(300, &window, [&window, file] {
          QPixmap picture = window.screen()->grabWindow(window.winId());
          if (picture.isNull()) picture = window.grab();
          const bool ok = picture.save(file);
          if (!ok) qCritical("qvl-studio: cannot write %s", qPrintable(file));
          QApplication::exit(ok ? 0 : 1);
        });
      };
      QObject::connect(&engine, &qvl::ui::EngineController::perfUpdated, &window, [save, at](const qvl::ui::PerfSnapshot& s) {
        if (s.tokens >= at) QTimer::singleShot(0, save);
      });
      QObject::connect(&engine, &qvl::ui::EngineController::answerFinished, &window, [save] { QTimer::singleShot(0, save); });
    }
  }
  return QApplication::exec();
}
