#pragma once
// Samples the GPU's vital signs (backend/gpu_vitals.h) twice a second off the GUI thread (an NVML read takes a few
// ms) and hands each sample to the GUI thread; without NVML, says why once.
#include <QFutureWatcher>
#include <QObject>
#include <QTimer>
#include <memory>

#include "backend/gpu_vitals.h"

namespace qvl::ui {

class GpuVitalsPoller : public QObject {
  Q_OBJECT
public:
  explicit GpuVitalsPoller(QObject* parent = nullptr);
  ~GpuVitalsPoller() override;
  // Opens the source for the CUDA device (its UUID), starts sampling; reports unavailable() when there is none.
  void start();

signals:
  void sampled(const QString& device, const qvl::GpuVitals& vitals);
  void unavailable(const QString& reason);

private:
  struct Reading {
    GpuVitals vitals;
    QString error;  // the driver refused a read
  };
  void sample_now();

  std::unique_ptr<GpuVitalsSource> source_;
  QTimer timer_;
  QFutureWatcher<Reading> watcher_;
};

}  // namespace qvl::ui
