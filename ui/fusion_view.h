#pragma once
// Fused versus unfused: runs the current prompt both ways (on request) and shows the phase times and per-kernel
// totals side by side, the speed-ups, and how far the fused output is from the unfused reference.
#include <QWidget>

#include "runtime/fusion_comparison.h"

class QLabel;
class QPushButton;
class QTableWidget;

namespace qvl::ui {

class FusionView : public QWidget {
  Q_OBJECT
public:
  explicit FusionView(QWidget* parent = nullptr);
  void show_comparison(const FusionComparison& c);
  void show_error(const QString& error);
  void set_running(bool running);
  void set_available(bool available, const QString& why = {});
  QString verdict() const;  // the output-difference line
  QString summary() const;  // what was compared, and what was not
  int kernel_rows() const;

signals:
  void compareRequested();

private:
  QPushButton* run_;
  QLabel* summary_;
  QLabel* verdict_;
  QTableWidget* phases_;
  QTableWidget* kernels_;
};

}  // namespace qvl::ui
