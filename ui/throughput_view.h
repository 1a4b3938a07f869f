#pragma once
// Time to first token, prefill and decode speed of the answer in progress and of the one before it.
#include <QWidget>

#include "ui/engine_types.h"

class QLabel;

namespace qvl::ui {

class ThroughputView : public QWidget {
  Q_OBJECT
public:
  explicit ThroughputView(QWidget* parent = nullptr);
  void update_from(const PerfSnapshot& s);
  // The GPU's vital signs (GpuVitalsPoller), with a warning while heat or power hold the clocks back.
  void show_vitals(const QString& device, const GpuVitals& v);
  void show_vitals_unavailable(const QString& reason);  // NVML's reason
  void set_gpu_unavailable(const QString& reason);      // the engine's, why no GPU can be used (empty: one can)
  QString vitals_text() const;
  QString throttle_warning() const;  // empty when hidden

private:
  struct Column {
    QLabel *ttft, *prefill, *decode, *tokens;
  };
  static void fill(const Column& c, const PerfSnapshot& s);
  Column current_{}, last_{};
  void show_why_no_vitals();
  QLabel *vitals_, *throttle_;
  QString vitals_reason_, gpu_reason_;
  PerfSnapshot latest_;
  quint64 current_id_ = 0;
};

}  // namespace qvl::ui
