#include "ui/main_window.h"

#include <QFileDialog>
#include <QLabel>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QSettings>
#include <QStatusBar>
#include <QVBoxLayout>

#include "backend/availability.h"
#include "ui/model_loader.h"

namespace qvl::ui {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), loader_(new ModelLoader(this)), model_label_(new QLabel), details_(new QPlainTextEdit) {
  setWindowTitle("qvl studio");
  auto* central = new QWidget;
  auto* layout = new QVBoxLayout(central);
  model_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  details_->setReadOnly(true);
  layout->addWidget(model_label_);
  layout->addWidget(details_);
  setCentralWidget(central);

  auto* file = menuBar()->addMenu("&File");
  file->addAction("&Open model folder…", QKeySequence::Open, this, &MainWindow::chooseModel);
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);

  QString backends;
  for (const auto& line : describe_backends()) backends += QString::fromStdString(line) + "\n";
  statusBar()->showMessage(QString::fromStdString(describe_backends().back()));

  connect(loader_, &ModelLoader::loaded, this, [this, backends](const QString& folder, const QString& summary) {
    model_label_->setText("Model: " + folder);
    details_->setPlainText(summary + "\n\n" + backends);
    QSettings().setValue("model/last", folder);
  });
  connect(loader_, &ModelLoader::failed, this, [this](const QString& folder, const QString& error) {
    model_label_->setText("Could not open " + folder);
    details_->setPlainText(error);
  });
  resize(900, 600);
}

void MainWindow::openModel(const QString& folder) {
  model_label_->setText("Checking " + folder + " …");
  loader_->open(folder);
}

void MainWindow::chooseModel() {
  const QString folder = QFileDialog::getExistingDirectory(this, "Open a Qwen3-VL model folder");
  if (!folder.isEmpty()) openModel(folder);
}

}  // namespace qvl::ui
