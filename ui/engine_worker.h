#pragma once
// The engine on its own thread: every slot runs there (the controller invokes them through queued connections),
// every result goes back as a signal. The GUI thread never waits on it; a request is cancelled through the shared
// flag, which the engine checks after every token.
#include <QElapsedTimer>
#include <QObject>
#include <atomic>
#include <functional>
#include <memory>

#include "runtime/engine.h"
#include "ui/engine_types.h"

namespace qvl::ui {

// What a view that draws the engine's memory pool gives the worker (ui/vulkan_views.cpp makes one): `publish` runs
// on the engine's thread after steps (at most every 33 ms), after answers and moves; `forget_device` before the
// model moves (imports into the old backend go with it). Either may throw; the worker then stops calling them.
struct PoolFrameSink {
  std::function<void(Engine&)> publish;
  std::function<void()> forget_device;
};

class EngineWorker : public QObject {
  Q_OBJECT
public:
  explicit EngineWorker(const std::atomic<bool>* cancel, QObject* parent = nullptr);
  ~EngineWorker() override;

public slots:
  void load(const QString& folder, const qvl::ui::EngineSettings& settings);
  void generate(const qvl::ui::ChatRequest& request);
  void setDevice(const QString& device);
  void configureGpu(const QString& cuda_profile, qint64 memory_limit_mib);
  void setFusions(bool on);
  void setProfiling(bool on);
  void compareFusions(const qvl::ui::ChatRequest& request);
  void publishPoolFrame();  // a frame for the pool view now (it was resized or just made)

signals:
  void loadProgress(double fraction);
  void modelLoaded(const qvl::ui::ModelInfo& info);
  // kept: the folder was refused before anything was unloaded, and the model that was open still is.
  void modelFailed(const QString& folder, const QString& error, bool kept);
  void deviceChanged(const qvl::ui::ModelInfo& info);  // after a device, profile, pool or fusion change
  void settingFailed(const QString& error);            // such a change was refused; the model is where it was
  void tokenReady(quint64 id, const QString& piece);
  void perfUpdated(const qvl::ui::PerfSnapshot& snapshot);
  void answerFinished(const qvl::ui::Answer& answer);
  void answerFailed(quint64 id, const QString& error);
  void fusionCompared(const qvl::FusionComparison& comparison);
  void fusionCompareFailed(const QString& error);
  void poolFrameFailed(const QString& error);  // the pool view's frames cannot be drawn (it falls back)

public:
  // Set once from the GUI thread before the worker's thread starts work (or through a queued call).
  void set_pool_frame_sink(PoolFrameSink sink) { pool_frames_ = std::move(sink); }

private:
  void forget_pool_device();
  ModelInfo info() const;
  GenerateRequest with_images(const ChatRequest& request) const;
  PerfSnapshot snapshot(quint64 id) const;

  const std::atomic<bool>* cancel_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<Profiler> profiler_;
  QString folder_;
  PoolFrameSink pool_frames_;
};

}  // namespace qvl::ui
