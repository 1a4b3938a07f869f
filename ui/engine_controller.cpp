#include "ui/engine_controller.h"

#include "ui/engine_worker.h"

namespace qvl::ui {

namespace {
// The CPU engine would take every core (its pool's workers spin between loops), and the GUI thread then waits for
// a time slice: 59 ms measured on a 2-core machine. Unless the user chose ($QVL_THREADS), leave one core to the GUI.
void leave_a_core_for_the_gui() {
  if (!qEnvironmentVariableIsSet("QVL_THREADS"))
    qputenv("QVL_THREADS", QByteArray::number(std::max(1, QThread::idealThreadCount() - 1)));
}

void register_types() {
  qRegisterMetaType<ModelInfo>();
  qRegisterMetaType<EngineSettings>();
  qRegisterMetaType<ChatRequest>();
  qRegisterMetaType<PerfSnapshot>();
  qRegisterMetaType<Answer>();
  qRegisterMetaType<FusionComparison>();
}
}  // namespace

EngineController::EngineController(QObject* parent) : QObject(parent), worker_(new EngineWorker(&cancel_)) {
  leave_a_core_for_the_gui();  // before the engine's thread pool is made (on its first loop)
  register_types();
  thread_.setObjectName("engine");
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  flush_timer_.setInterval(33);
  connect(&flush_timer_, &QTimer::timeout, this, &EngineController::flush_text);

  connect(worker_, &EngineWorker::loadProgress, this, &EngineController::loadProgress);
  connect(worker_, &EngineWorker::modelLoaded, this, [this](const ModelInfo& info) {
    model_ = info;
    has_model_ = true;
    loading_ = false;
    end_work();
    emit modelLoaded(info);
  });
  connect(worker_, &EngineWorker::modelFailed, this, [this](const QString& folder, const QString& error, bool kept) {
    has_model_ = kept;
    loading_ = false;
    end_work();
    emit modelFailed(folder, error, kept);
  });
  connect(worker_, &EngineWorker::deviceChanged, this, [this](const ModelInfo& info) {
    model_ = info;
    if (pending_id_ == 0) end_work();  // the end of a device or fusion change (an answer ends with answerFinished)
    emit deviceChanged(info);
  });
  connect(worker_, &EngineWorker::settingFailed, this, &EngineController::settingFailed);
  connect(worker_, &EngineWorker::tokenReady, this, [this](quint64 id, const QString& piece) {
    if (id != pending_id_) return;
    pending_text_ += piece;
    if (!flush_timer_.isActive()) flush_timer_.start();
  });
  connect(worker_, &EngineWorker::perfUpdated, this, &EngineController::perfUpdated);
  connect(worker_, &EngineWorker::viewFeedFailed, this, &EngineController::viewFeedFailed);
  connect(worker_, &EngineWorker::attentionHeat, this, &EngineController::attentionHeat);
  connect(worker_, &EngineWorker::answerFinished, this, [this](const Answer& answer) {
    flush_text();
    pending_id_ = 0;
    end_work();
    emit answerFinished(answer);
  });
  connect(worker_, &EngineWorker::answerFailed, this, [this](quint64 id, const QString& error) {
    flush_text();
    pending_id_ = 0;
    end_work();
    emit answerFailed(id, error);
  });
  connect(worker_, &EngineWorker::fusionCompared, this, [this](const FusionComparison& c) {
    end_work();
    emit fusionCompared(c);
  });
  connect(worker_, &EngineWorker::fusionCompareFailed, this, [this](const QString& error) {
    end_work();
    emit fusionCompareFailed(error);
  });
  thread_.start();
}

EngineController::~EngineController() {
  cancel_ = true;
  thread_.quit();
  thread_.wait();
}

bool EngineController::start_work() {
  if (busy_ || !has_model_) return false;
  busy_ = true;
  cancel_ = false;
  emit busyChanged(true);
  return true;
}

void EngineController::end_work() {
  if (!busy_) return;
  busy_ = false;
  emit busyChanged(false);
}

void EngineController::flush_text() {
  flush_timer_.stop();
  if (pending_text_.isEmpty()) return;
  const QString text = std::exchange(pending_text_, {});
  emit textArrived(pending_id_, text);
}

void EngineController::openModel(const QString& folder, const EngineSettings& settings) {
  if (busy_) return;
  busy_ = loading_ = true;
  emit busyChanged(true);
  emit loadStarted(folder);
  QMetaObject::invokeMethod(worker_, [w = worker_, folder, settings] { w->load(folder, settings); }, Qt::QueuedConnection);
}

quint64 EngineController::send(ChatRequest request) {
  if (!start_work()) return 0;
  request.id = next_id_++;
  pending_id_ = request.id;
  pending_text_.clear();
  QMetaObject::invokeMethod(worker_, [w = worker_, request] { w->generate(request); }, Qt::QueuedConnection);
  return request.id;
}

void EngineController::stop() { cancel_ = true; }

void EngineController::compareFusions(ChatRequest request) {
  if (!start_work()) return;
  QMetaObject::invokeMethod(worker_, [w = worker_, request] { w->compareFusions(request); }, Qt::QueuedConnection);
}

void EngineController::setDevice(const QString& device) {
  if (!start_work()) return;
  QMetaObject::invokeMethod(worker_, [w = worker_, device] { w->setDevice(device); }, Qt::QueuedConnection);
}

void EngineController::configureGpu(const QString& cuda_profile, qint64 memory_limit_mib) {
  if (!start_work()) return;
  QMetaObject::invokeMethod(worker_, [w = worker_, cuda_profile, memory_limit_mib] { w->configureGpu(cuda_profile, memory_limit_mib); },
                            Qt::QueuedConnection);
}

void EngineController::setFusions(bool on) {
  if (!start_work()) return;
  QMetaObject::invokeMethod(worker_, [w = worker_, on] { w->setFusions(on); }, Qt::QueuedConnection);
}

void EngineController::setProfiling(bool on) {
  // Takes effect from the next answer; queued behind a running one, so never while it runs.
  QMetaObject::invokeMethod(worker_, [w = worker_, on] { w->setProfiling(on); }, Qt::QueuedConnection);
}

void EngineController::setViewFeed(ViewFeed feed) {
  QMetaObject::invokeMethod(worker_, [w = worker_, feed = std::move(feed)] { w->set_view_feed(feed); }, Qt::QueuedConnection);
}

void EngineController::setAttentionView(qint64 layer, qint64 head) { worker_->set_attention_view({layer, head}); }

void EngineController::publishPoolFrame() {
  QMetaObject::invokeMethod(worker_, [w = worker_] { w->publishPoolFrame(); }, Qt::QueuedConnection);
}

}  // namespace qvl::ui
