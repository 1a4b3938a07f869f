#pragma once
// Opens and checks a model folder off the GUI thread; the result arrives as a signal.
#include <QFutureWatcher>
#include <QObject>
#include <QString>

namespace qvl::ui {

class ModelLoader : public QObject {
  Q_OBJECT
public:
  explicit ModelLoader(QObject* parent = nullptr);
  void open(const QString& folder);

signals:
  void loaded(const QString& folder, const QString& summary);
  void failed(const QString& folder, const QString& error);

private:
  struct Result {
    QString folder, summary, error;
  };
  QFutureWatcher<Result> watcher_;
};

}  // namespace qvl::ui
