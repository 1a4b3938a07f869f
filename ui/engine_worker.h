#pragma once
// The engine on its own thread: every slot runs there (the controller invokes them through queued connections),
// every result goes back as a signal. The GUI thread never waits on it; a request is cancelled through the shared
// flag, which the engine checks after every token.
#include <QElapsedTimer>
#include <QObject>
#include <QVector>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "runtime/engine.h"
#include "ui/engine_types.h"

namespace qvl::ui {

// What views that draw the engine's own data give the worker (ui/vulkan_views.cpp makes one), all called on the
// engine's thread: `publish_pool` after steps (at most every 33 ms), answers and moves (`force`: the view asked for
// a frame, e.g. at a new size; else only a changed pool makes one); `publish_attention` after each decode step while
// an attention view is set; `forget_device` before the model moves (imports into the old backend go with it). Any
// may throw; the worker then stops calling them and says why (viewFeedFailed).
struct ViewFeed {
  std::function<void(Engine&, bool force)> publish_pool;
  std::function<void(Engine&, const AttentionFrame&)> publish_attention;
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
  void publishPoolFrame();  // a frame for the pool view now (it was resized or just made), changed or not
  void publishAttention(const AttentionFrame& frame);  // from the answer's sink

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
  void viewFeedFailed(const QString& error);  // the views' frames cannot be drawn (they fall back)
  // A step's attention heat read back to the host, for a view QPainter draws (no ViewFeed takes it).
  void attentionHeat(const QVector<float>& heat, int grid_w, int grid_h, qint64 layer, qint64 head);

public:
  void set_view_feed(ViewFeed feed) { feed_ = std::move(feed); }
  // The attention a view watches (any thread): applied to the engine before the next answer and after every token.
  void set_attention_view(AttentionView view) { view_ = pack_view(view); }
  void apply_attention_view();
  void publish_pool_frame(bool force);  // from the answer's sink: only a changed pool makes a frame unless forced

private:
  void forget_pool_device();
  void drop_feed(const std::string& why);  // a feed that threw: its imports forgotten, the views told why
  ModelInfo info() const;
  GenerateRequest with_images(const ChatRequest& request) const;
  PerfSnapshot snapshot(quint64 id) const;

  const std::atomic<bool>* cancel_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<Profiler> profiler_;
  QString folder_;
  ViewFeed feed_;
  std::atomic<uint64_t> view_{pack_view({})};  // layer and head in one word: a step never sees half a change
  std::chrono::steady_clock::time_point last_heat_{};
  static constexpr int kHeatIntervalMs = 15;  // the QPainter view's read-backs, at most one per 15 ms
  // The live snapshots' kernel summary, made again at most every kKernelTableIntervalMs: it walks every event of the
  // answer so far (hundreds of thousands at 2,000 tokens), on this thread, between tokens. The answer's last snapshot
  // makes its own.
  mutable std::vector<KernelSummary> kernels_;
  mutable std::chrono::steady_clock::time_point kernels_at_{};
};

}  // namespace qvl::ui
