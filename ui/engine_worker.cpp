#include "ui/engine_worker.h"

#include "core/thread_pool.h"

#include <chrono>

#include <QElapsedTimer>
#include <optional>
#include <vector>

#include "backend/registry.h"
#include "core/paths.h"
#include "io/model_folder.h"
#include "vision/image.h"

namespace qvl::ui {

namespace {


QString summarise(const ModelFolder& m) {
  const auto& t = m.config.text;
  const auto& v = m.config.vision;
  return QString("%1 layers, hidden %2, %3 heads (%4 KV) · vision %5 blocks, patch %6 · %7 M parameters, %8 MiB")
      .arg(t.num_hidden_layers).arg(t.hidden_size).arg(t.num_attention_heads).arg(t.num_key_value_heads)
      .arg(v.depth).arg(v.patch_size)
      .arg(double(m.config.parameter_count()) / 1e6, 0, 'f', 1)
      .arg(double(m.checkpoint.total_bytes()) / (1 << 20), 0, 'f', 1);
}

// Streams tokens to the GUI and, at most every kLiveViewInterval, the live numbers.
class SignalSink final : public TokenSink {
public:
  SignalSink(EngineWorker& worker, quint64 id, std::function<PerfSnapshot()> snapshot)
      : worker_(worker), id_(id), snapshot_(std::move(snapshot)) {
    clock_.start();
  }
  void on_token(int32_t id, const std::string& text) override {
    worker_.apply_attention_view();  // a view chosen mid-answer applies from the next step
    if (!text.empty()) emit worker_.tokenReady(id_, QString::fromStdString(text));
    if (id < 0) return;  // the detokeniser's tail, not a step
    const double now = double(clock_.nsecsElapsed()) / 1e6;
    if (tokens_ == 0) ttft_ms_ = now;
    else steps_.push_back(now - last_ms_);
    last_ms_ = now;
    ++tokens_;
    if (now - emitted_ms_ >= kLiveViewInterval.count()) {
      emitted_ms_ = now;
      emit worker_.perfUpdated(live());
      worker_.publish_pool_frame(false);
      steps_.clear();
    }
  }
  void on_attention(const AttentionFrame& frame) override { worker_.publishAttention(frame); }
  void on_prompt_done(const GenerateTiming& t) override {
    prompt_tokens_ = t.prompt_tokens;
    cached_tokens_ = t.cached_tokens;  // the chat's kept tokens: not prefilled again, not in the rate
    if (t.prefill_ms > 0) prefill_tokens_per_s_ = double(t.prompt_tokens - t.cached_tokens) / t.prefill_ms * 1e3;
  }
  PerfSnapshot live() const {
    PerfSnapshot s = snapshot_();
    s.request_id = id_;
    s.step_ms = steps_;
    s.tokens = tokens_;
    s.ttft_ms = ttft_ms_;
    s.prompt_tokens = prompt_tokens_;
    s.cached_tokens = cached_tokens_;
    s.prefill_tokens_per_s = prefill_tokens_per_s_;
    if (tokens_ > 1) s.decode_tokens_per_s = double(tokens_ - 1) / ((last_ms_ - ttft_ms_) / 1e3);
    return s;
  }

private:
  EngineWorker& worker_;
  quint64 id_;
  std::function<PerfSnapshot()> snapshot_;
  QElapsedTimer clock_;
  std::vector<double> steps_;
  qint64 tokens_ = 0, prompt_tokens_ = 0, cached_tokens_ = 0;
  double prefill_tokens_per_s_ = 0;
  double ttft_ms_ = 0, last_ms_ = 0, emitted_ms_ = -1e9;
};

}  // namespace

EngineWorker::EngineWorker(const std::atomic<bool>* cancel, QObject* parent) : QObject(parent), cancel_(cancel) {}
EngineWorker::~EngineWorker() { forget_pool_device(); }  // imports into the backend go before it

ModelInfo EngineWorker::info() const {
  ModelInfo i;
  const ModelFolder& m = engine_->model();
  i.folder = folder_;
  i.summary = summarise(m);
  i.demo = std::filesystem::weakly_canonical(m.dir) == std::filesystem::weakly_canonical(default_model_dir());
  i.device = QString::fromStdString(engine_->device());
  i.backend = QString::fromStdString(engine_->backend_name());
  i.fallback_reason = QString::fromStdString(engine_->fallback_reason());
  for (const BackendInfo& b : backend_registry())
    i.backends.push_back({QString::fromStdString(b.id), QString::fromStdString(b.label), b.available,
                          QString::fromStdString(b.reason), b.has_device_memory, b.has_profiles});
  i.device_error = QString::fromStdString(engine_->device_error());
  i.layers = int(m.config.text.num_hidden_layers);
  i.heads = int(m.config.text.num_attention_heads);
  for (const auto& f : engine_->fusions().enabled()) i.fusions << QString::fromStdString(f);
  i.memory = engine_->memory_report(true);
  i.weights = QString::fromStdString(engine_->weights());
  if (const auto plan = engine_->memory_plan())
    i.memory_plan = QString::fromStdString("Memory plan: " + plan->summary() + "\n" + plan->table()).trimmed();
  i.preprocessor = engine_->image_preprocessor();
  i.generation = m.generation;
  i.counting = {engine_->shared_tokenizer(), i.preprocessor, int(m.config.image_token_id), engine_->context_tokens()};
  i.weights_file_bytes = m.checkpoint.total_bytes();
  i.decode_weight_bytes = engine_->decode_weight_bytes();
  i.cpu_threads = ThreadPool::global().size();
  return i;
}

void EngineWorker::load(const QString& folder, const EngineSettings& settings) {
  // The folder is checked (configs, tokenizer, every tensor's name and shape) before the open model is let go: a
  // folder that is no model once unloaded the working one.
  std::optional<ModelFolder> checked;
  try {
    checked = ModelFolder::open(folder.toStdString());
  } catch (const std::exception& e) {
    emit modelFailed(folder, QString::fromStdString(e.what()), engine_ != nullptr);
    return;
  }
  EngineOptions options;
  options.device = settings.device.toStdString();
  options.cuda_profile = settings.cuda_profile.toStdString();
  options.device_memory_limit = std::size_t(std::max<qint64>(0, settings.memory_limit_mib)) << 20;
  // A folder written by qvl quantize holds its own format; the saved choice is for float folders (applied to this
  // one it would quantise twice and the folder would not open).
  options.weights = checked->config.quantization ? "bf16" : settings.weights.toStdString();
  options.fusions = settings.fusions ? Fusions{} : Fusions::none();
  options.load_progress = [this](double f) { emit loadProgress(f); };
  try {
    forget_pool_device();
    engine_.reset();  // the old model's memory goes first (a GPU may not hold two)
    engine_ = Engine::load(std::move(*checked), options);
    folder_ = folder;
    if (profiler_) engine_->set_profiler(profiler_);
    emit modelLoaded(info());
    publish_pool_frame(false);
  } catch (const std::exception& e) {
    engine_.reset();
    emit modelFailed(folder, QString::fromStdString(e.what()), false);
  }
}

GenerateRequest EngineWorker::with_images(const ChatRequest& request) const {
  GenerateRequest r = request.request;
  r.images.clear();
  for (const QString& path : request.image_paths) r.images.push_back(ImageInput::file(path.toStdString()));
  return r;
}

PerfSnapshot EngineWorker::snapshot(quint64 id) const {
  PerfSnapshot s;
  s.request_id = id;
  if (profiler_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - kernels_at_ >= std::chrono::milliseconds(kKernelTableIntervalMs)) {
      kernels_ = profiler_->summary();
      kernels_at_ = now;
    }
    s.kernels = kernels_;
  }
  s.memory = engine_->memory_report(true);
  s.conversations = engine_->conversation_cache();
  s.pictures = engine_->vision_cache();
  return s;
}

void EngineWorker::generate(const ChatRequest& request) {
  if (!engine_) {
    emit answerFailed(request.id, "no model is open");
    return;
  }
  try {
    const GenerateRequest r = with_images(request);
    if (profiler_) profiler_->clear();  // the table ranks this answer's kernels
    kernels_at_ = {};                   // and its first snapshot says so
    apply_attention_view();
    SignalSink sink(*this, request.id, [this, id = request.id] { return snapshot(id); });
    const GenerateResult result = engine_->generate(r, &sink, cancel_);
    PerfSnapshot last = sink.live();
    last.final = true;
    if (profiler_) last.kernels = profiler_->summary();  // every kernel of the answer
    last.conversations = engine_->conversation_cache();  // as the answer left them (kept after its last token)
    last.pictures = engine_->vision_cache();
    emit perfUpdated(last);
    emit answerFinished({request.id, QString::fromStdString(result.text), QString::fromStdString(result.stop_reason),
                         QString::fromStdString(engine_->device()), result.timing});
    publish_pool_frame(false);
  } catch (const std::exception& e) {
    emit answerFailed(request.id, QString::fromStdString(e.what()));
    if (!engine_->device_error().empty()) emit deviceChanged(info());  // the toggle learns the GPU is gone
  }
}

void EngineWorker::publishPoolFrame() { publish_pool_frame(true); }

void EngineWorker::publish_pool_frame(bool force) {
  if (!engine_ || !feed_.publish_pool) return;
  try {
    feed_.publish_pool(*engine_, force);
  } catch (const std::exception& e) {
    drop_feed(e.what());
  }
}

void EngineWorker::publishAttention(const AttentionFrame& frame) {
  if (!engine_) return;
  try {
    if (feed_.publish_attention) return feed_.publish_attention(*engine_, frame);
    // The QPainter view: read back (a few KB after the step's own read-back), at most as often as it can be drawn.
    const auto now = std::chrono::steady_clock::now();
    if (now - last_heat_ < std::chrono::milliseconds(kHeatIntervalMs)) return;
    last_heat_ = now;
    const Tensor host = frame.backend->to_host(*frame.heat);
    emit attentionHeat(QVector<float>(host.data<float>(), host.data<float>() + host.numel()), int(frame.grid_w),
                       int(frame.grid_h), frame.layer, frame.head);
  } catch (const std::exception& e) {
    drop_feed(e.what());
  }
}

void EngineWorker::apply_attention_view() {
  if (engine_) engine_->set_attention_view(unpack_view(view_.load()));
}

void EngineWorker::forget_pool_device() {
  if (!feed_.forget_device) return;
  try {
    feed_.forget_device();
  } catch (const std::exception& e) {
    feed_ = {};
    emit viewFeedFailed(QString::fromStdString(e.what()));
  }
}

void EngineWorker::drop_feed(const std::string& why) {
  forget_pool_device();  // the channels must not keep imports into a backend that may go before them
  feed_ = {};
  emit viewFeedFailed(QString::fromStdString(why));
}

void EngineWorker::setDevice(const QString& device) {
  if (!engine_) return;
  try {
    forget_pool_device();
    engine_->set_device(device.toStdString());
  } catch (const std::exception& e) {
    emit settingFailed(QString::fromStdString(e.what()));
  }
  emit deviceChanged(info());
  publish_pool_frame(false);
}

void EngineWorker::configureGpu(const QString& cuda_profile, qint64 memory_limit_mib) {
  if (!engine_) return;
  try {
    forget_pool_device();
    engine_->configure_gpu(cuda_profile.toStdString(), std::size_t(std::max<qint64>(0, memory_limit_mib)) << 20);
  } catch (const std::exception& e) {
    emit settingFailed(QString::fromStdString(e.what()));
  }
  emit deviceChanged(info());
  publish_pool_frame(false);
}

void EngineWorker::setFusions(bool on) {
  if (!engine_) return;
  engine_->set_fusions(on ? Fusions{} : Fusions::none());
  emit deviceChanged(info());
}

void EngineWorker::setProfiling(bool on) {
  profiler_ = on ? std::make_shared<Profiler>() : nullptr;
  if (engine_) engine_->set_profiler(profiler_);
}

void EngineWorker::compareFusions(const ChatRequest& request) {
  if (!engine_) {
    emit fusionCompareFailed("no model is open");
    return;
  }
  try {
    emit fusionCompared(compare_fusions(*engine_, with_images(request), cancel_, true));
  } catch (const std::exception& e) {
    emit fusionCompareFailed(QString::fromStdString(e.what()));
  }
}

}  // namespace qvl::ui
