#pragma once
#include <QMainWindow>

class QLabel;
class QPlainTextEdit;

namespace qvl::ui {

class ModelLoader;

// The studio's main window. For now: which model is open (checked on a worker thread) and which backends exist.
class MainWindow : public QMainWindow {
  Q_OBJECT
public:
  explicit MainWindow(QWidget* parent = nullptr);
  void openModel(const QString& folder);

private:
  void chooseModel();
  ModelLoader* loader_;
  QLabel* model_label_;
  QPlainTextEdit* details_;
};

}  // namespace qvl::ui
