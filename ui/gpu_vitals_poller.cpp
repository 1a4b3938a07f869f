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
  connect(&opening_, &QFutureWatcher<Opened>::finished, this, [this] {
    const Opened opened = opening_.result();
    source_ = opened.source;
    if (!source_) return emit unavailable(opened.reason);
    set_active(active_);
  });
  connect(&reading_, &QFutureWatcher<Reading>::finished, this, [this] {
    const Reading r = reading_.result();
    if (r.error.isEmpty()) emit sampled(QString::fromStdString(source_->device_name()), r.vitals);
    else emit unavailable(r.error);
  });
}

GpuVitalsPoller::~GpuVitalsPoller() {
  timer_.stop();
  opening_.waitForFinished();
  reading_.waitForFinished();  // the read in flight uses the source
}

void GpuVitalsPoller::start() {
  opening_.setFuture(QtConcurrent::run([]() -> Opened {
    std::string reason;
    std::shared_ptr<GpuVitalsSource> source = open_gpu_vitals(cuda_device_uuid(0), &reason);
    return {std::move(source), QString::fromStdString(reason)};
  }));
}

void GpuVitalsPoller::set_active(bool on) {
  active_ = on;
  if (!source_) return;  // not open yet: applied once it is
  if (!on) return timer_.stop();
  if (!timer_.isActive()) {
    timer_.start();
    sample_now();
  }
}

void GpuVitalsPoller::sample_now() {
  if (reading_.isRunning()) return;  // one read at a time: the source is not shared between threads
  reading_.setFuture(QtConcurrent::run([source = source_]() -> Reading {
    try {
      return {source->sample(), {}};
    } catch (const std::exception& e) {
      return {{}, QString::fromStdString(e.what())};
    }
  }));
}

}  // namespace qvl::ui
