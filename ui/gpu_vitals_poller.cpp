#include "ui/gpu_vitals_poller.h"

#include <QtConcurrent/QtConcurrentRun>

#include "backend/cuda_plugin.h"

namespace qvl::ui {

namespace {
constexpr int kPeriodMs = 500;
}  // namespace

GpuVitalsPoller::GpuVitalsPoller(QObject* parent) : QObject(parent) {
  timer_.setInterval(kPeriodMs);
  connect(&timer_, &QTimer::timeout, this, &GpuVitalsPoller::sample_now);
  connect(&watcher_, &QFutureWatcher<Reading>::finished, this, [this] {
    const Reading r = watcher_.result();
    if (r.error.isEmpty()) return emit sampled(QString::fromStdString(source_->device_name()), r.vitals);
    timer_.stop();  // the driver refused a read: say so and stop asking
    emit unavailable(r.error);
  });
}

void GpuVitalsPoller::sample_now() {
  if (watcher_.isRunning()) return;  // one read at a time: the source is not shared between threads
  watcher_.setFuture(QtConcurrent::run([source = source_.get()]() -> Reading {
    try {
      return {source->sample(), {}};
    } catch (const std::exception& e) {
      return {{}, QString::fromStdString(e.what())};
    }
  }));
}

GpuVitalsPoller::~GpuVitalsPoller() {
  timer_.stop();
  watcher_.waitForFinished();  // the read in flight uses the source
}

void GpuVitalsPoller::start() {
  std::string reason;
  source_ = open_gpu_vitals(cuda_device_uuid(0), &reason);
  if (!source_) {
    emit unavailable(QString::fromStdString(reason));
    return;
  }
  timer_.start();
  sample_now();
}

}  // namespace qvl::ui
