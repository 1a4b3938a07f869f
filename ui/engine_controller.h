#pragma once
// The GUI thread's handle on the engine: owns the worker thread, turns calls into queued invocations, keeps the
// state the widgets ask about (model, busy), and coalesces streamed text into at most ~30 updates a second.
#include <QObject>
#include <QThread>
#include <QTimer>
#include <atomic>

#include "ui/engine_types.h"
#include "ui/engine_worker.h"

namespace qvl::ui {

class EngineWorker;

class EngineController : public QObject {
  Q_OBJECT
public:
  explicit EngineController(QObject* parent = nullptr);
  ~EngineController() override;  // cancels a running answer and waits for the worker thread

  void openModel(const QString& folder, const EngineSettings& settings);
  // Starts an answer; returns its id (0 when busy or no model is open: nothing is started).
  quint64 send(ChatRequest request);
  void stop();  // the answer ends within one token
  void compareFusions(ChatRequest request);
  void setDevice(const QString& device);
  void configureGpu(const QString& cuda_profile, qint64 memory_limit_mib);
  void setFusions(bool on);
  void setProfiling(bool on);
  // The views' frames, drawn on the engine's thread (engine_worker.h's ViewFeed).
  void setViewFeed(ViewFeed feed);
  void publishPoolFrame();
  // The attention view's layer (-1: off) and head (-1: the mean); takes effect at the next token.
  void setAttentionView(qint64 layer, qint64 head);

  bool busy() const { return busy_; }
  bool loading() const { return loading_; }
  bool hasModel() const { return has_model_; }
  const ModelInfo& model() const { return model_; }

signals:
  void loadStarted(const QString& folder);
  void loadProgress(double fraction);
  void modelLoaded(const qvl::ui::ModelInfo& info);
  // kept: the folder was refused before anything was unloaded, and the model that was open still is.
  void modelFailed(const QString& folder, const QString& error, bool kept);
  void deviceChanged(const qvl::ui::ModelInfo& info);
  void settingFailed(const QString& error);
  void busyChanged(bool busy);
  void textArrived(quint64 id, const QString& text);  // coalesced pieces of the answer
  void perfUpdated(const qvl::ui::PerfSnapshot& snapshot);
  void answerFinished(const qvl::ui::Answer& answer);
  void answerFailed(quint64 id, const QString& error);
  void fusionCompared(const qvl::FusionComparison& comparison);
  void fusionCompareFailed(const QString& error);
  void viewFeedFailed(const QString& error);
  void attentionHeat(const QVector<float>& heat, int grid_w, int grid_h, qint64 layer, qint64 head);

private:
  bool start_work();  // false when busy or without a model
  void end_work();
  void flush_text();

  QThread thread_;
  EngineWorker* worker_;
  std::atomic<bool> cancel_{false};
  QTimer flush_timer_;
  QString pending_text_;
  quint64 pending_id_ = 0, next_id_ = 1;
  ModelInfo model_;
  bool busy_ = false, loading_ = false, has_model_ = false;
};

}  // namespace qvl::ui
