#pragma once
// Samples the GPU's vital signs (backend/gpu_vitals.h) twice a second while the performance panel is open, off the GUI
// thread (NVML is opened, and each read made, on a worker: the driver's calls may block, and the first loads a
// library) and hands each sample to the GUI thread;
// without NVML, says why. Not polling while nobody looks keeps a laptop's discrete GPU free to sleep.
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
  // Opens the source for the CUDA device (its UUID) on a worker; reports unavailable() when there is none.
  void start();
  void set_active(bool on);  // sample while on

signals:
  void sampled(const QString& device, const qvl::GpuVitals& vitals);
  void unavailable(const QString& reason);

private:
  struct Reading {
    GpuVitals vitals;
    QString error;  // the driver refused a read (said; the next read may work)
  };
  struct Opened {
    std::shared_ptr<GpuVitalsSource> source;
    QString reason;
  };
  void sample_now();

  std::shared_ptr<GpuVitalsSource> source_;
  bool active_ = false;
  QTimer timer_;
  QFutureWatcher<Opened> opening_;
  QFutureWatcher<Reading> reading_;
};

}  // namespace qvl::ui
