// qvl-studio under the offscreen platform, driven like a user: full turns with the demo model (streamed text in the
// view), stop, regenerate, the device and fusion toggles, a corrupt image, pasted and dropped images, saving and
// reopening chats, the fusion comparison, a bad model folder, and a GUI thread that stays responsive throughout.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>

#include <QAction>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QDropEvent>
#include <QContextMenuEvent>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QImageReader>
#include <QImageWriter>
#include <QLocale>
#include <QMessageBox>
#include <QPainter>
#include <QTableWidget>
#include <QToolButton>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QSlider>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTableView>
#include <QStyle>
#include <QTest>
#include <QHeaderView>
#include <QUrl>

#include "backend/cuda_plugin.h"
#include "backend/pool_picture.h"
#if QVL_STUDIO_VULKAN
#include <QScreen>
#include <QVBoxLayout>

#include "render/pictures.h"
#include "render/vulkan_device.h"
#include "ui/vulkan_heatmap_window.h"
#include "ui/vulkan_pool_window.h"
#include "ui/vulkan_views.h"
#endif
#include "ui/chat_list_panel.h"
#include "ui/chat_model.h"
#include "ui/chat_export.h"
#include "ui/chat_store.h"
#include "ui/chat_view.h"
#include "ui/composer.h"
#include "ui/context_meter.h"
#include "ui/engine_controller.h"
#include "ui/fusion_view.h"
#include "ui/generation_settings.h"
#include "ui/kernel_view.h"
#include "ui/main_window.h"
#include "ui/picture_loader.h"
#include "ui/pool_view.h"
#include "ui/throughput_view.h"

using namespace qvl::ui;
using qvl::MemoryReport;
using qvl::PoolMapGeometry;
#if QVL_STUDIO_VULKAN
namespace render = qvl::render;
#endif

namespace {

// A file manager's drag: enter, then drop.
void drop_onto(QWidget* target, const QMimeData& mime) {
  QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &enter);
  QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &drop);
}

QString resources() { return qEnvironmentVariable("QVL_RESOURCE_DIR"); }
QString demo_model() { return resources() + "/models/demo-tiny"; }
QString shapes_image() { return QString(QVL_SOURCE_DIR) + "/resources/samples/scene-1.png"; }

// The GUI thread's pulse: the worst gap between a 5 ms timer's ticks while it runs (a blocked event loop is a gap).
class Heartbeat {
public:
  Heartbeat() {
    timer_.setInterval(5);
    QObject::connect(&timer_, &QTimer::timeout, [this] {
      const qint64 now = clock_.elapsed();
      worst_ = std::max(worst_, now - last_);
      last_ = now;
    });
    clock_.start();
    timer_.start();
  }
  void stop() { timer_.stop(); }
  qint64 worst_ms() const { return worst_; }
  qint64 elapsed_ms() const { return clock_.elapsed(); }

private:
  QElapsedTimer clock_;
  QTimer timer_;
  qint64 last_ = 0, worst_ = 0;
};

}  // namespace

#if QVL_STUDIO_VULKAN
// Pixels of `shot` (what the X server shows) unlike the CPU's rendering `expected` (width x height in `order`).
int pixels_unlike(const QImage& shot, const std::vector<uint32_t>& expected, uint32_t width, uint32_t height,
                  render::ChannelOrder order) {
  int wrong = 0;
  for (uint32_t y = 0; y < height; ++y)
    for (uint32_t x = 0; x < width; ++x) {
      const uint32_t p = expected[size_t(y) * width + x];
      const int c0 = int(p & 0xff), c1 = int((p >> 8) & 0xff), c2 = int((p >> 16) & 0xff);
      const QRgb want = order == render::ChannelOrder::Rgba ? qRgb(c0, c1, c2) : qRgb(c2, c1, c0);
      if ((shot.pixel(int(x), int(y)) & 0xffffff) != (want & 0xffffff)) ++wrong;
    }
  return wrong;
}
#endif

class StudioTest : public QObject {
  Q_OBJECT

private:
  std::unique_ptr<QTemporaryDir> store_;
  std::unique_ptr<QTemporaryDir> settings_dir_;  // this process's QSettings files
  std::unique_ptr<MainWindow> window_;

  MainWindow& window() { return *window_; }
  template <typename T> T* child(const char* name) {
    T* w = window_->findChild<T*>(name);
    if (!w) qFatal("no child %s", name);
    return w;
  }
  void set_max_new_tokens(int n) { child<QSpinBox>("max_new_tokens")->setValue(n); }
  void set_greedy() { child<QCheckBox>("sample")->setChecked(false); }
  bool idle() { return window().engine().hasModel() && !window().engine().busy(); }
  // Sends and waits for the answer; returns it.
  Answer send(const QString& text, const QStringList& images = {}) {
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    window().sendPrompt(text, images);
    if (!finished.wait(60000)) qFatal("no answer within 60 s");
    return finished.first().first().value<Answer>();
  }
  const ChatTurn& last_turn() { return window().chat().conversation().turns.last(); }
  // A file with a PNG signature and no image dropped onto the composer, as a file manager would; waits for the
  // notice that refuses it.
  void drop_broken_png() {
    const QString bad = store_->filePath("broken.png");
    {
      QFile f(bad);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("\x89PNG\r\n\x1a\n this is not really a png");
    }
    QSignalSpy shown(&window(), &MainWindow::noticeShown);
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(bad)});
    drop_onto(&window().composer(), mime);
    QVERIFY(shown.wait(10000));
  }

private slots:
  void initTestCase() {
    qputenv("QVL_NVML_LIBRARY", "");  // no real GPU readings in these tests (ctest sets it too): recordings instead
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName("qvl-test");
    QCoreApplication::setApplicationName("qvl-studio-test");
    // Settings of this process only: ctest runs the ui tests in parallel, and one's init() clearing a shared
    // settings file while another checked what it saved made the check fail at random.
    settings_dir_ = std::make_unique<QTemporaryDir>();
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir_->path());
    QVERIFY2(QFile::exists(demo_model() + "/config.json"), qPrintable("no demo model at " + demo_model()));
  }

  void init() {
    QSettings().clear();
    QSettings().setValue("view/performance_panel", true);  // the docks the tests look at are shown
    store_ = std::make_unique<QTemporaryDir>();
    window_ = std::make_unique<MainWindow>(store_->path());
    window_->show();
    window_->openModel(demo_model());
    QTRY_VERIFY_WITH_TIMEOUT(idle(), 30000);
    QCOMPARE(window().engine().model().device, QString("cpu"));
    set_greedy();
  }

  void cleanup() {
    window_.reset();  // stops and joins the engine thread
    store_.reset();
  }

  // Vulkan on a real window system (ctest runs this one under xvfb-run with lavapipe): frames published into the
  // pool channel, as the engine's thread does, are coloured by the shader and presented; the pixels kept and the
  // pixels the X server shows both equal the CPU colouring (which also checks the swapchain's channel order).
  void thePoolMapIsDrawnByVulkanOnScreen() {
#if QVL_STUDIO_VULKAN
    if (QGuiApplication::platformName() != "xcb") QSKIP("needs a window system: ctest runs it under xvfb-run");
    QString reason;
    const auto views = VulkanViews::create(&reason);
    QVERIFY2(views, qPrintable(reason));
    auto* pool_window = new VulkanPoolWindow(*views);
    QWidget host;
    auto* layout = new QVBoxLayout(&host);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(QWidget::createWindowContainer(pool_window));
    host.resize(420, 140);
    host.show();
    QVERIFY(QTest::qWaitForWindowExposed(&host));
    MemoryReport r;
    r.available = true;
    r.by_owner = {{"weights", 600 << 20}, {"kv cache", 200 << 20}, {"activations", 50 << 20}};
    r.allocated = 850 << 20;
    r.reserved = 1000 << 20;
    r.capacity = 1200 << 20;
    r.segment_map = {{600 << 20, {{0, 600 << 20, true, "weights"}}},
                     {400 << 20, {{0, 200 << 20, true, "kv cache"}, {200 << 20, 50 << 20, true, "activations"},
                                  {250 << 20, 150 << 20, false, ""}}}};
    const QSize pixels = pool_window->size() * pool_window->devicePixelRatio();
    QElapsedTimer clock;
    clock.start();
    while (clock.elapsed() < 10000 && (pool_window->frames_shown() < 3 || pool_window->shown_geometry().width != pixels.width() ||
                                       pool_window->shown_geometry().height != pixels.height())) {
      views->pool_channel()->publish(r, nullptr);
      QTest::qWait(30);
    }
    const PoolMapGeometry g = pool_window->shown_geometry();
    QCOMPARE(QSize(g.width, g.height), pixels);
    const auto expected = render::colour_pool_map(qvl::draw_pool_map(qvl::pool_map_table(r), g), g,
                                                  qvl::pool_map_capacity_column(r, g), pool_window->order());
    QVERIFY(pool_window->shown_pixels() == expected);
    QTest::qWait(200);  // the present is asynchronous
    const QImage shot = pool_window->screen()->grabWindow(pool_window->winId()).toImage().convertToFormat(QImage::Format_RGB32);
    QCOMPARE(shot.size(), pixels);
    const int wrong = pixels_unlike(shot, expected, uint32_t(g.width), uint32_t(g.height), pool_window->order());
    QCOMPARE(wrong, 0);
    const auto messages = views->device().validation_messages();
    QVERIFY2(messages.empty(), messages.empty() ? "" : messages.front().c_str());
#else
    QSKIP("qvl-studio was built without Vulkan");
#endif
  }

  // The attention view during an answer (ctest runs this under xvfb-run with lavapipe; the model on the CPU, so the
  // heat reaches Vulkan through a host upload): frames arrive while the answer streams (the newest at each look, so
  // fewer than the steps), say what they are, and the pixels shown (kept and on screen) are the CPU's blend of the
  // picture and the heat of the frame shown.
  void theAttentionViewFollowsTheAnswerOnScreen() {
#if QVL_STUDIO_VULKAN
    if (QGuiApplication::platformName() != "xcb") QSKIP("needs a window system: ctest runs it under xvfb-run");
    VulkanHeatmapWindow* heat_window = nullptr;  // a QWindow: its parent is the container's window, not a widget
    for (QWindow* w : QGuiApplication::allWindows())
      if (auto* found = qobject_cast<VulkanHeatmapWindow*>(w)) heat_window = found;
    QVERIFY2(heat_window, qPrintable("no Vulkan attention view: " + child<QLabel>("attention_source")->text()));
    window().findChild<QDockWidget*>("attention_dock")->raise();
    QVERIFY(QTest::qWaitForWindowExposed(window().findChild<QWidget*>("attention_vulkan_view")));
    QCOMPARE(child<QComboBox>("attention_layer")->currentData().toLongLong(), 0LL);
    set_max_new_tokens(300);  // the random-weight model talks until the limit: frames for half a second or more
    QSignalSpy shown(heat_window, &VulkanViewWindow::frameShown);
    send("What shapes do you see?", {resources() + "/samples/scene-2.png"});
    const int during = int(shown.count());
    QTRY_VERIFY_WITH_TIMEOUT(heat_window->frames_shown() > 0, 5000);
    QVERIFY2(heat_window->frames_shown() >= 3, qPrintable(QString::number(heat_window->frames_shown()) + " frames"));
    QVERIFY(during > 0);  // some arrived before the answer ended
    for (uint64_t seen = 0; seen != heat_window->frames_shown();) {  // until the last frame is on screen
      seen = heat_window->frames_shown();
      QTest::qWait(150);
    }
    const auto meta = heat_window->shown_meta();
    // The caption says what the frame on screen is (it once said the previous frame's: "0 x 0 patches" at first).
    QCOMPARE(child<QLabel>("attention_status")->text(),
             QString("Layer 0, mean of heads: %1 x %2 patches").arg(meta.grid_w).arg(meta.grid_h));
    QVERIFY(meta.grid_w > 0 && meta.grid_h > 0);
    const auto heat = heat_window->shown_heat();
    QCOMPARE(heat.size(), size_t(meta.grid_w) * meta.grid_h);
    const render::HeatmapShape shape{heat_window->picture_width(), heat_window->picture_height(), meta.grid_w, meta.grid_h,
                                     render::kHeatOpacity};
    const auto expected = render::colour_heatmap(heat_window->picture_pixels(), heat, shape, heat_window->order());
    QVERIFY(heat_window->shown_pixels() == expected);
    const QImage shot = heat_window->screen()->grabWindow(heat_window->winId()).toImage().convertToFormat(QImage::Format_RGB32);
    const int wrong = pixels_unlike(shot, expected, shape.width, shape.height, heat_window->order());
    QCOMPARE(wrong, 0);
    // Off: no more frames.
    child<QComboBox>("attention_layer")->setCurrentIndex(0);
    const uint64_t before = heat_window->frames_shown();
    send("What shapes do you see?", {resources() + "/samples/scene-2.png"});
    QTest::qWait(100);
    QCOMPARE(heat_window->frames_shown(), before);
#else
    QSKIP("qvl-studio was built without Vulkan");
#endif
  }

  void theWeightsChoiceReloadsTheModelQuantised() {
    auto* weights = child<QComboBox>("weights");
    QCOMPARE(window().engine().model().weights, QString("bf16"));
    weights->setCurrentIndex(weights->findData("q8"));
    emit weights->activated(weights->currentIndex());
    QTRY_VERIFY_WITH_TIMEOUT(idle() && window().engine().model().weights == "q8", 30000);
    set_max_new_tokens(6);
    const Answer q8 = send("What shapes do you see?", {shapes_image()});
    QCOMPARE(q8.timing.generated_tokens, 6);  // the test model's random weights: the answer's words say nothing
    QCOMPARE(QSettings().value("engine/weights").toString(), QString("q8"));  // and the next start keeps it
  }

  void theMemoryPlanShowsOnlyWithAGpu() {
    auto* plan = child<QLabel>("pool_plan");
    QVERIFY2(plan->isHidden(), "the model runs on the CPU: no GPU memory plan to show");
    window().findChild<PoolView*>()->set_plan("Memory plan: everything on the GPU");
    QVERIFY(!plan->isHidden());
    QCOMPARE(plan->text(), QString("Memory plan: everything on the GPU"));
    window().findChild<PoolView*>()->set_plan({});
    QVERIFY(plan->isHidden());
  }

  // On a machine without a usable GPU the pool view said "switch to the GPU" and showed a disabled slider that looked
  // enabled (#22 bug 12): it says why there is no GPU, and the capacity control is hidden.
  // On the CPU the resource view shows what matters there: resident memory, the mapped weights, the threads and,
  // after an answer, the bandwidth its decode used.
  void theCpuResourcesShowWhereThereIsNoPool() {
    auto* pool = window_->findChild<PoolView*>();
    child<QDockWidget>("kernels_dock")->raise();
    pool->show_cpu_resources({});
    QTest::qWait(1200);  // a tick of the once-a-second reading
    QVERIFY2(pool->cpu_resources().isEmpty(), qPrintable(pool->cpu_resources()));  // not read while hidden
    child<QDockWidget>("pool_dock")->raise();
    QTRY_VERIFY2(pool->cpu_resources().startsWith("On the CPU: resident memory "), qPrintable(pool->cpu_resources()));
    QVERIFY(pool->cpu_resources().contains(QString("the weights %1 MiB")
                                               .arg(double(window().engine().model().weights_file_bytes) / (1 << 20), 0, 'f', 1)));
    QVERIFY(!pool->cpu_resources().contains("decode read"));
    QVERIFY(!pool->findChild<BlockMap*>()->isVisible());  // no pool: no empty bar or map beneath
    QVERIFY(!pool->findChild<OwnerBar*>()->isVisible());
    set_max_new_tokens(30);
    send("What shapes do you see?", {shapes_image()});
    QTRY_VERIFY_WITH_TIMEOUT(pool->cpu_resources().contains("GB/s of weights"), 3000);
    // What the engine keeps between answers: this chat's keys and values, and the picture's features.
    const QString kept = child<QLabel>("pool_kept")->text();
    QVERIFY2(QRegularExpression("^Kept between answers: [1-9][0-9]* chats?' keys and values, [0-9.]+ MiB of [0-9.]+ MiB · "
                                "[1-9][0-9]* pictures?' features, [0-9.]+ MiB of 256.0 MiB \\(host memory\\)$")
                 .match(kept).hasMatch(),
             qPrintable(kept));
  }

  void thePoolViewSaysWhyThereIsNoGpu() {
    if (window().engine().model().device != "cpu") QSKIP("a GPU is in use here: the pool view shows the pool");
    const QString summary = child<QLabel>("pool_summary")->text();
    QVERIFY2(!summary.contains("Switch to the GPU"), qPrintable(summary));
    QVERIFY2(summary.contains("no GPU to switch to: No usable"), qPrintable(summary));
    QVERIFY(child<QSlider>("pool_capacity")->isHidden());
    // The GPU vital signs give the same reason first, NVML's after it (the two docks once disagreed).
    const QString why = summary.mid(summary.indexOf("No usable"));
    auto* throughput = window_->findChild<ThroughputView*>();
    QTRY_VERIFY2(throughput->vitals_text().startsWith("GPU vital signs: none. " + why + " (NVML: "),
                 qPrintable(throughput->vitals_text() + " | " + why));
  }

  void aFullTurnStreamsIntoTheView() {
    set_max_new_tokens(40);
    QSignalSpy pieces(&window().engine(), &EngineController::textArrived);
    QSignalSpy perf(&window().engine(), &EngineController::perfUpdated);
    const Answer answer = send("What shapes do you see?", {shapes_image()});
    QCOMPARE(answer.timing.generated_tokens <= 40, true);
    QVERIFY2(pieces.count() >= 1, "no text reached the view while the answer streamed");
    QCOMPARE(window().chat().rowCount(), 2);
    QCOMPARE(last_turn().role, QString("assistant"));
    QCOMPARE(last_turn().text, answer.text);  // the streamed pieces add up to the engine's answer
    QVERIFY(!answer.text.isEmpty());
    QVERIFY2(last_turn().stats.contains(QString("%1 tokens").arg(answer.timing.generated_tokens)), qPrintable(last_turn().stats));
    QCOMPARE(window().chat().conversation().turns.first().images, QStringList{shapes_image()});
    // The live views got the answer's numbers: the kernels that ran and a final snapshot with every token.
    QVERIFY(perf.count() >= 1);
    // Every snapshot, also the live ones, carries the prompt's numbers (known before the first token).
    QCOMPARE(perf.first().first().value<PerfSnapshot>().prompt_tokens, answer.timing.prompt_tokens);
    const PerfSnapshot final_snapshot = perf.last().first().value<PerfSnapshot>();
    QVERIFY(final_snapshot.final);
    QCOMPARE(final_snapshot.tokens, answer.timing.generated_tokens);
    QCOMPARE(final_snapshot.prompt_tokens, answer.timing.prompt_tokens);
    const auto& kernels = window().findChild<KernelView*>()->table().kernels();
    QVERIFY(!kernels.empty());
    QVERIFY(std::any_of(kernels.begin(), kernels.end(), [](const auto& k) { return k.name.rfind("attention", 0) == 0; }));
  }

  // Help > Try a sample picture on the trained demo model: the bundled picture and question, sent with Enter, get
  // the answer transformers gives (resources/samples/answers.json).
  void aSamplePictureGetsTheDemoModelsAnswer() {
    window().openModel(resources() + "/models/demo-shapes");
    QTRY_VERIFY_WITH_TIMEOUT(idle() && window().engine().model().folder.endsWith("demo-shapes"), 30000);
    set_greedy();
    set_max_new_tokens(48);
    child<QAction>("try_sample")->trigger();
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().pending_checks(), 0, 10000);
    // The sample, as every attached file, is kept with the chat: a copy under the store's attachments.
    QCOMPARE(window().composer().image_paths().size(), qsizetype(1));
    const QString kept = window().composer().image_paths().first();
    QVERIFY2(kept.startsWith(store_->path() + "/attachments/") && kept.endsWith("/scene-1.png"), qPrintable(kept));
    QCOMPARE(window().composer().text(), QString("What shapes do you see?"));
    QFile answers(resources() + "/samples/answers.json");
    QVERIFY(answers.open(QIODevice::ReadOnly));
    const QJsonObject first = QJsonDocument::fromJson(answers.readAll()).array().first().toObject();
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    auto* prompt = child<PromptEdit>("prompt");
    prompt->setFocus();
    QTest::keyClick(prompt, Qt::Key_Return);
    QVERIFY(finished.wait(30000));
    QCOMPARE(last_turn().text, first["transformers"].toString());
    child<QAction>("try_sample")->trigger();  // the next picture
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().pending_checks(), 0, 10000);
    QCOMPARE(window().composer().image_paths().size(), qsizetype(1));
    QVERIFY(window().composer().image_paths().first().endsWith("/scene-2.png"));
  }

  void enterSendsAndShiftEnterBreaksTheLine() {
    set_max_new_tokens(4);
    auto* prompt = child<PromptEdit>("prompt");
    prompt->setFocus();
    QTest::keyClicks(prompt, "first line");
    QTest::keyClick(prompt, Qt::Key_Return, Qt::ShiftModifier);
    QTest::keyClicks(prompt, "second line");
    QCOMPARE(prompt->toPlainText(), QString("first line\nsecond line"));
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    QTest::keyClick(prompt, Qt::Key_Return);
    QVERIFY(finished.wait(30000));
    QCOMPARE(window().chat().conversation().turns.first().text, QString("first line\nsecond line"));
    QVERIFY(prompt->toPlainText().isEmpty());
  }

  void escapeStopsTheAnswer() {
    set_max_new_tokens(4000);
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    QSignalSpy perf(&window().engine(), &EngineController::perfUpdated);
    window().sendPrompt("Tell me a very long story.", {});
    QVERIFY(perf.wait(30000));  // tokens are flowing
    QTest::keyClick(&window(), Qt::Key_Escape);
    QVERIFY(finished.wait(30000));
    const Answer a = finished.first().first().value<Answer>();
    QCOMPARE(a.stop_reason, QString("cancelled"));
    QVERIFY(a.timing.generated_tokens < 4000);
    QVERIFY(last_turn().stats.contains("stopped"));
    QVERIFY(idle());
    QVERIFY(child<QPushButton>("send")->text() == "Send");
  }

  void regenerateReplacesTheLastAnswer() {
    set_max_new_tokens(16);
    const Answer first = send("Describe the picture.", {shapes_image()});
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    window().regenerate();
    QVERIFY(finished.wait(30000));
    QCOMPARE(window().chat().rowCount(), 2);  // replaced, not appended
    // Greedy: the same context gives the same answer, so the request was rebuilt exactly (image included).
    QCOMPARE(last_turn().text, first.text);
  }

  // Regenerate with sampling once gave the same answer (the seed stayed 0): "random" now draws a seed per answer, and
  // a chosen seed gives the same answer again.
  void regenerateWithSamplingSamplesAnotherAnswer() {
    set_max_new_tokens(16);
    child<QCheckBox>("sample")->setChecked(true);
    child<QDoubleSpinBox>("temperature")->setValue(3.0);  // the test model's random weights: spread-out choices
    QCOMPARE(child<QSpinBox>("seed")->value(), 0);         // "random", the default
    const Answer first = send("Describe the picture.");
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    window().regenerate();
    QVERIFY(finished.wait(30000));
    QVERIFY2(last_turn().text != first.text, qPrintable(first.text));
    child<QSpinBox>("seed")->setValue(7);
    const Answer seeded = send("Describe it again.");
    window().regenerate();
    QVERIFY(finished.wait(30000));
    QCOMPARE(last_turn().text, seeded.text);
  }

  // Opening an old chat without a system prompt once emptied the default, so every new chat lost it too.
  void openingAChatWithoutASystemPromptKeepsTheDefault() {
    set_max_new_tokens(2);
    send("Hello");  // saved without a system prompt
    const QString old_chat = window().chat().conversation().id;
    QVERIFY(!old_chat.isEmpty());
    window().newChat();
    child<QPlainTextEdit>("system_prompt")->setPlainText("Answer in one word.");  // typed: the new default
    QVERIFY(window().openChat(old_chat));
    QCOMPARE(child<QPlainTextEdit>("system_prompt")->toPlainText(), QString());  // the chat's own, shown
    window().newChat();
    QCOMPARE(child<QPlainTextEdit>("system_prompt")->toPlainText(), QString("Answer in one word."));
    QCOMPARE(window().chat().conversation().system_prompt, QString("Answer in one word."));
  }

  // The app once reopened on a blank chat: it reopens on the one that was open, and on a new one after New chat.
  void theAppReopensOnTheLastChat() {
    set_max_new_tokens(2);
    send("Hello");
    const QString id = window().chat().conversation().id;
    QVERIFY(!id.isEmpty());
    window_.reset();
    window_ = std::make_unique<MainWindow>(store_->path());
    QCOMPARE(window().chat().conversation().id, id);
    QCOMPARE(window().chat().rowCount(), 2);
    window().newChat();
    window_.reset();
    window_ = std::make_unique<MainWindow>(store_->path());
    QCOMPARE(window().chat().rowCount(), 0);
  }

  // An error banner once stayed through later answers and new chats; it goes when the user moves on.
  void anErrorBannerGoesWithTheNextQuestionOrChat() {
    for (int round = 0; round < 2; ++round) {
      drop_broken_png();
      QVERIFY(window().notice().contains("broken.png"));
      if (round == 0) {
        set_max_new_tokens(2);
        send("Still there?");
      } else {
        window().newChat();
      }
      QVERIFY2(window().notice().isEmpty(), qPrintable(window().notice()));
    }
  }

  void fusionToggleChangesTheOpsNotTheAnswer() {
    set_max_new_tokens(12);
    const Answer fused = send("Which colours are there?", {shapes_image()});
    QSignalSpy changed(&window().engine(), &EngineController::deviceChanged);
    child<QCheckBox>("fusions")->setChecked(false);
    QVERIFY(changed.wait(10000));
    QVERIFY(window().engine().model().fusions.isEmpty());
    window().newChat();
    const Answer unfused = send("Which colours are there?", {shapes_image()});
    QCOMPARE(unfused.text, fused.text);
    const auto& kernels = window().findChild<KernelView*>()->table().kernels();
    QVERIFY(std::none_of(kernels.begin(), kernels.end(), [](const auto& k) { return k.name.rfind("add+rms_norm", 0) == 0; }));
    child<QCheckBox>("fusions")->setChecked(true);
    QVERIFY(changed.wait(10000));
    QCOMPARE(window().engine().model().fusions, (QStringList{"add+rms_norm", "linear q+k+v", "qk_norm+rope+append", "linear+swiglu", "add+layer_norm",
                             "bias+gelu", "flash attention", "rms_norm+linear", "layer_norm+linear",
                             "head bounds+pick"}));
  }

  void deviceToggleSwitchesOrSaysWhyItCannot() {
    auto* device = child<QComboBox>("device");
    if (!qvl::cuda_plugin().usable) {
      qInfo("no usable GPU here (%s): checking that the toggle is disabled and says why", qvl::cuda_plugin().reason.c_str());
      QVERIFY(!device->isEnabled());
      QVERIFY2(device->toolTip().contains(QString::fromStdString(qvl::cuda_plugin().reason)), qPrintable(device->toolTip()));
      QVERIFY(!child<QCheckBox>("sm61")->isEnabled());
      return;
    }
    set_max_new_tokens(8);
    const Answer on_cpu = send("Count the shapes.", {shapes_image()});
    QSignalSpy changed(&window().engine(), &EngineController::deviceChanged);
    device->setCurrentIndex(1);
    emit device->activated(1);
    QVERIFY(changed.wait(30000));
    QCOMPARE(window().engine().model().device, QString("cuda"));
    window().newChat();
    const Answer on_gpu = send("Count the shapes.", {shapes_image()});
    QCOMPARE(on_gpu.device, QString("cuda"));
    QCOMPARE(on_gpu.timing.generated_tokens, on_cpu.timing.generated_tokens);
    device->setCurrentIndex(0);
    emit device->activated(0);
    QVERIFY(changed.wait(30000));
    QCOMPARE(window().engine().model().device, QString("cpu"));
  }

  void aCorruptImageIsRefusedWithItsNameAndTheAppGoesOn() {
    drop_broken_png();
    QVERIFY2(window().notice().contains("broken.png"), qPrintable(window().notice()));
    QVERIFY(window().composer().image_paths().isEmpty());
    set_max_new_tokens(4);
    QVERIFY(!send("Still there?").text.isEmpty());
  }

  void pastedAndDroppedImagesBecomeAttachmentsWithTheirCost() {
    QImage image(320, 200, QImage::Format_RGB32);
    image.fill(Qt::darkGreen);
    QApplication::clipboard()->setImage(image);
    auto* prompt = child<PromptEdit>("prompt");
    prompt->setFocus();
    QTest::keyClick(prompt, Qt::Key_V, Qt::ControlModifier);  // paste
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(1), 10000);
    QMimeData dropped;
    dropped.setUrls({QUrl::fromLocalFile(shapes_image())});
    drop_onto(&window().composer(), dropped);
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(2), 10000);
    const QString pasted_path = window().composer().image_paths().first();
    QVERIFY(pasted_path.endsWith(".png"));
    QCOMPARE(QImage(pasted_path).size(), QSize(320, 200));
    // Each chip states its resized size and token cost, computed like the engine's preprocessing.
    const auto chips = window().composer().findChildren<AttachmentChip*>();
    QCOMPARE(chips.size(), qsizetype(2));
    for (auto* chip : chips) {
      const auto labels = chip->findChildren<QLabel*>();
      QVERIFY(std::any_of(labels.begin(), labels.end(), [](QLabel* l) { return l->text().contains("image tokens"); }));
    }
    set_max_new_tokens(4);
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    QTest::mouseClick(child<QPushButton>("send"), Qt::LeftButton);
    QVERIFY(finished.wait(30000));
    QCOMPARE(window().chat().conversation().turns.first().images.size(), qsizetype(2));
  }

  // An attached file was only referenced: renamed after the answer, the follow-up failed with "cannot open the image"
  // while its thumbnail still showed (#22 bug 3). A copy is kept with the chat, under the file's own name.
  void anAttachedFileIsKeptWithTheChat() {
    QTemporaryDir elsewhere;
    const QString original = elsewhere.filePath("my picture.png");
    QVERIFY(QFile::copy(shapes_image(), original));
    QMimeData dropped;
    dropped.setUrls({QUrl::fromLocalFile(original)});
    drop_onto(&window().composer(), dropped);
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(1), 10000);
    const QString kept = window().composer().image_paths().first();
    QVERIFY2(kept.startsWith(store_->path() + "/attachments/"), qPrintable(kept));
    QCOMPARE(QFileInfo(kept).fileName(), QString("my picture.png"));
    set_max_new_tokens(4);
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    QTest::mouseClick(child<QPushButton>("send"), Qt::LeftButton);
    QVERIFY(finished.wait(30000));
    QCOMPARE(window().chat().conversation().turns.first().images, QStringList{kept});
    QVERIFY(QFile::rename(original, elsewhere.filePath("renamed.png")));
    const Answer follow_up = send("And now?");
    QVERIFY(!follow_up.text.isEmpty());
    QCOMPARE(last_turn().text, follow_up.text);
  }

  // A small GIF was refused while the Attach dialog listed GIF (#22, the new-user trial): a format the engine does
  // not decode and Qt does is attached as a PNG copy of the same pixels, named after it and saying so.
  void aGifIsAttachedAsAPngCopy() {
    QImage picture(40, 30, QImage::Format_RGB32);
    picture.fill(QColor(200, 40, 40));
    QPainter(&picture).fillRect(QRect(0, 0, 20, 30), QColor(40, 40, 200));
    // Qt writes no GIF: a one-pixel GIF by hand, then the same check with a picture Qt reads in another format the
    // engine does not (PPM).
    const QString gif = store_->filePath("dot.gif"), ppm = store_->filePath("halves.ppm");
    {
      QFile f(gif);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QByteArray("GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00"
                         "\x00\x02\x02" "D\x01\x00;", 35));
    }
    QVERIFY(picture.save(ppm, "PPM"));
    // Where the build's OpenCV decodes GIF (4.11 and later, built with it), the engine reads it as it is.
    const bool engine_reads_gif = [&] {
      try {
        qvl::load_image(gif.toStdString());
        return true;
      } catch (const std::exception&) {
        return false;
      }
    }();
    for (const auto& [path, format, size] : {std::tuple{gif, QString("GIF"), QSize(1, 1)}, {ppm, QString("PPM"), QSize(40, 30)}}) {
      window().composer().clear();
      window().composer().attach_files({path});
      QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(1), 10000);
      const QString copy = window().composer().image_paths().first();
      QVERIFY2(copy.startsWith(store_->path() + "/attachments/"), qPrintable(copy));
      if (format == "GIF" && engine_reads_gif) {
        QCOMPARE(QFileInfo(copy).fileName(), QString("dot.gif"));
        continue;
      }
      QCOMPARE(QFileInfo(copy).fileName(), QFileInfo(path).completeBaseName() + ".png");
      const QImage kept(copy);
      QCOMPARE(kept.size(), size);
      QCOMPARE(kept.pixelColor(0, 0).rgb(), QImage(path).pixelColor(0, 0).rgb());
      QCOMPARE(kept.pixelColor(size.width() - 1, 0).rgb(), QImage(path).pixelColor(size.width() - 1, 0).rgb());
      auto* chip = window().composer().findChild<AttachmentChip*>();
      QVERIFY2(chip->toolTip().contains("a PNG copy of a " + format), qPrintable(chip->toolTip()));
      QVERIFY(window().notice().isEmpty());
    }
    // A copy keeps the place of the file it was made of (it once went after the pictures given with it).
    window().composer().clear();
    window().composer().attach_files({ppm, shapes_image()});
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(2), 10000);
    QCOMPARE(QFileInfo(window().composer().image_paths()[0]).fileName(), QString("halves.png"));
    QCOMPARE(QFileInfo(window().composer().image_paths()[1]).fileName(), QFileInfo(shapes_image()).fileName());
    set_max_new_tokens(3);
    QVERIFY(!send("What is this?", window().composer().image_paths()).text.isEmpty());
    QVERIFY(!last_turn().failed);
  }

  // Send looked enabled with nothing to send: it is enabled by a question or a picture.
  void sendIsEnabledBySomethingToSend() {
    auto* send_button = child<QPushButton>("send");
    window().composer().clear();
    QVERIFY(!send_button->isEnabled());
    QVERIFY2(send_button->toolTip().contains("Write a question or attach a picture"), qPrintable(send_button->toolTip()));
    window().composer().set_text("   ");
    QVERIFY(!send_button->isEnabled());
    window().composer().set_text("What is it?");
    QVERIFY(send_button->isEnabled());
    window().composer().clear();
    window().composer().attach_files({shapes_image()});
    QTRY_VERIFY_WITH_TIMEOUT(send_button->isEnabled(), 10000);
  }

  // A new chat was a blank page: it says how to begin, until it has a turn.
  void anEmptyChatSaysHowToBegin() {
    window().newChat();
    auto* view = child<ChatView>("chat_view");
    QVERIFY2(view->empty_hint().contains("Try a sample picture"), qPrintable(view->empty_hint()));
    const QImage shown = view->viewport()->grab().toImage();
    const QRgb background = shown.pixel(1, 1);
    qint64 drawn = 0;
    for (int y = 0; y < shown.height(); ++y)
      for (int x = 0; x < shown.width(); ++x) drawn += shown.pixel(x, y) != background;
    QVERIFY2(drawn > 200, qPrintable(QString::number(drawn)));  // the words are on the page
    set_max_new_tokens(2);
    send("Hello?");
    QVERIFY(view->empty_hint().isEmpty());
  }

  // A second new-user trial: a sent WebP read "(missing)" in its bubble where this Qt has no WebP plugin (the engine
  // reads WebP), five pictures widened the window and crushed the Chats dock, the demo note drew over the chat when it
  // grew a line, at 1024 x 640 the panel left the composer 95 px, and a right-clicked chat stayed selected while
  // another was shown.
  void picturesShowAsTheEngineReadsThemAndKeepTheWindowsSize() {
    const QString webp = QString(QVL_SOURCE_DIR) + "/tests/ui/scene-64.webp";
    const QImage shown = load_scaled_picture(webp, QSize(56, 56));
    QVERIFY2(!shown.isNull(), "a WebP the engine reads has no picture for its bubble");
    QCOMPARE(shown.height(), 56);
    window().resize(1280, 820);
    QTRY_COMPARE(window().width(), 1280);
    const int chats_width = child<QDockWidget>("chats_dock")->width();
    QStringList pictures;
    for (int i = 0; i < 6; ++i) pictures << shapes_image();
    window().composer().attach_files(pictures);
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(6), 20000);
    QTest::qWait(50);  // the layout settles
    QCOMPARE(window().width(), 1280);
    QVERIFY2(child<QDockWidget>("chats_dock")->width() >= chats_width - 2,
             qPrintable(QString("%1 -> %2").arg(chats_width).arg(child<QDockWidget>("chats_dock")->width())));
    window().composer().clear();
  }

  void theChatKeepsHalfASmallWindowAndNotesWrapInTheirOwnRoom() {
    window().openModel(resources() + "/models/demo-shapes");
    QTRY_VERIFY_WITH_TIMEOUT(idle() && window().engine().model().folder.endsWith("demo-shapes"), 30000);
    window().resize(1024, 640);
    QTRY_COMPARE(window().width(), 1024);
    auto* chat = child<ChatView>("chat_view");
    QTRY_VERIFY2(chat->width() * 2 >= 1024 - 40, qPrintable(QString::number(chat->width())));  // the splitters' px
    for (int w : {1400, 900, 1100}) {
      window().resize(w, 700);
      QTRY_COMPARE(window().width(), w);
      auto* note = child<QLabel>("note");
      QTRY_VERIFY2(note->height() >= note->heightForWidth(note->width()),
                   qPrintable(QString("%1 < %2 at %3").arg(note->height()).arg(note->heightForWidth(note->width())).arg(w)));
      // The chat starts below the note, not under it.
      QVERIFY(note->mapTo(&window(), QPoint(0, note->height())).y() <= chat->mapTo(&window(), QPoint(0, 0)).y());
    }
  }

  void aRightClickedChatDoesNotStaySelected() {
    set_max_new_tokens(2);
    send("First chat");
    const QString first = window().chat().conversation().id;
    window().newChat();
    send("Second chat");
    const QString second = window().chat().conversation().id;
    auto* list = child<QListWidget>("chat_list");
    auto* panel = window_->findChild<ChatListPanel*>();
    QCOMPARE(panel->selected_id(), second);
    QListWidgetItem* other = nullptr;
    for (int i = 0; i < list->count(); ++i)
      if (list->item(i)->data(Qt::UserRole).toString() == first) other = list->item(i);
    QVERIFY(other);
    QTimer::singleShot(200, [] {
      if (QWidget* menu = QApplication::activePopupWidget()) menu->close();
    });
    const QPoint at = list->visualItemRect(other).center();
    QTest::mousePress(list->viewport(), Qt::RightButton, {}, at);
    QContextMenuEvent menu_event(QContextMenuEvent::Mouse, at, list->viewport()->mapToGlobal(at));
    QApplication::sendEvent(list->viewport(), &menu_event);
    QTest::mouseRelease(list->viewport(), Qt::RightButton, {}, at);
    QCOMPARE(window().chat().conversation().id, second);
    QCOMPARE(panel->selected_id(), second);  // the chat shown, not the one clicked
    // A search that finds nothing says so.
    panel->set_search("no chat says this");
    QVERIFY(child<QLabel>("no_chat_matches")->isVisible());
    panel->set_search("");
    QVERIFY(!child<QLabel>("no_chat_matches")->isVisible());
  }

  // A passing note ("Exported the chat to …") once stayed through new chats and answers, and an "over the context"
  // error after the question was shortened.
  void passingNotesAndFixedErrorsGo() {
    set_max_new_tokens(2);
    send("Something to export");
    QTemporaryDir out;
    QVERIFY(window().exportChat(window().chat().conversation().id, out.filePath("x.md")));
    QVERIFY(window().note().startsWith("Exported the chat"));
    window().newChat();
    QVERIFY2(!window().note().startsWith("Exported the chat"), qPrintable(window().note()));
    QString words;
    for (int i = 0; i < 20000; ++i) words += QString(" word%1").arg(i % 97);
    window().composer().set_text(words);
    QSignalSpy shown(&window(), &MainWindow::noticeShown);
    QTest::mouseClick(child<QPushButton>("send"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(shown.size(), 1, 10000);
    QVERIFY2(window().notice().contains("tokens a request may hold"), qPrintable(window().notice()));
    window().composer().set_text("A short question.");  // now it fits: the error goes with the next count
    QTRY_VERIFY_WITH_TIMEOUT(window().notice().isEmpty(), 5000);
  }

  // An error once took the demo model's note's place, and the note was gone after it: they are two rows.
  void anErrorDoesNotTakeTheDemoNotesPlace() {
    window().openModel(resources() + "/models/demo-shapes");
    QTRY_VERIFY_WITH_TIMEOUT(idle() && window().engine().model().folder.endsWith("demo-shapes"), 30000);
    QVERIFY2(window().note().contains("This is the demo model"), qPrintable(window().note()));
    drop_broken_png();
    QVERIFY2(window().notice().contains("broken.png"), qPrintable(window().notice()));
    QVERIFY2(window().note().contains("This is the demo model"), qPrintable(window().note()));
    set_greedy();
    set_max_new_tokens(2);
    send("What shapes do you see?");
    QVERIFY2(!window().notice().contains("broken.png"), qPrintable(window().notice()));  // the error went
    QVERIFY2(window().note().contains("This is the demo model"), qPrintable(window().note()));  // the note stayed
    // Editing a question shows its note over the demo's; cancelled, the demo's comes back.
    window().editQuestion(0);
    QCOMPARE(window().note(), MainWindow::kEditingNote);
    child<QToolButton>("note_close")->click();  // cancels the edit
    QVERIFY(window().note().contains("This is the demo model"));
    window().editQuestion(0);
    window().end_editing();
    QVERIFY(window().note().contains("This is the demo model"));
    child<QToolButton>("note_close")->click();  // the demo's note closed: gone until another model opens
    QVERIFY(window().note().isEmpty());
    window().editQuestion(0);
    window().end_editing();
    QVERIFY(window().note().isEmpty());
  }

  // An export once linked the pictures inside the app's data folder: they are copied beside it and linked relatively;
  // ".md" is added to a name without it.
  void anExportedChatCarriesItsPictures() {
    set_max_new_tokens(3);
    send("What shapes do you see?", {shapes_image()});
    send("And here?", {shapes_image()});  // the same picture twice: one copy
    QTemporaryDir out;
    QVERIFY(window().exportChat(window().chat().conversation().id, out.filePath("my chat")));
    QFile md(out.filePath("my chat.md"));
    QVERIFY(md.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(md.readAll());
    const QString picture = QFileInfo(shapes_image()).fileName();
    const QString link = "](my%20chat%20pictures/" + QString(QUrl::toPercentEncoding(picture)) + ")";
    QCOMPARE(text.count(link), 2);
    QVERIFY2(!text.contains(store_->path()), qPrintable(text));
    const QString copy = out.filePath("my chat pictures/" + picture);
    QFile original(shapes_image()), copied(copy);
    QVERIFY(original.open(QIODevice::ReadOnly) && copied.open(QIODevice::ReadOnly));
    QCOMPARE(copied.readAll(), original.readAll());
    QCOMPARE(QDir(out.filePath("my chat pictures")).entryList(QDir::Files).size(), qsizetype(1));
    QVERIFY2(window().notice().contains("its pictures beside it"), qPrintable(window().notice()));
    // Exported again over it: a file of the user's in that folder stays; a picture gone since is named, not fatal.
    QFile mine(out.filePath("my chat pictures/notes.txt"));
    QVERIFY(mine.open(QIODevice::WriteOnly));
    mine.write("mine");
    mine.close();
    Conversation gone = window().chat().conversation();
    gone.turns.first().images = {out.filePath("no longer here.png")};
    QVERIFY(window().exportChat(gone.id, out.filePath("my chat")));  // the stored chat, pictures and all
    QVERIFY(QFile::exists(out.filePath("my chat pictures/notes.txt")));
    QString gone_error;
    QCOMPARE(export_chat_markdown(gone, out.filePath("gone.md"), &gone_error), out.filePath("gone.md"));
    QFile gone_md(out.filePath("gone.md"));
    QVERIFY(gone_md.open(QIODevice::ReadOnly));
    QVERIFY2(QString::fromUtf8(gone_md.readAll()).contains("(missing:no%20longer%20here.png)"), qPrintable(gone_error));
    // The suggested name is the chat's title, without what file systems refuse.
    Conversation named;
    named.title = "Colours: red/blue?";
    QCOMPARE(suggested_export_name(named), QString("Colours red blue.md"));
  }

  void chatsAreSavedAndReopened() {
    set_max_new_tokens(8);
    const Answer a = send("Remember this.", {shapes_image()});
    auto* list = child<QListWidget>("chat_list");
    QCOMPARE(list->count(), 1);
    const QString id = list->item(0)->data(Qt::UserRole).toString();
    QFile file(store_->path() + "/" + id + ".json");
    QVERIFY(file.open(QIODevice::ReadOnly));
    QVERIFY(QJsonDocument::fromJson(file.readAll()).isObject());
    QCOMPARE(QDir(store_->path()).entryList({"*.json"}, QDir::Files).size(), qsizetype(1));  // no temporary left over
    window().newChat();
    QCOMPARE(window().chat().rowCount(), 0);
    QVERIFY(window().openChat(id));
    QCOMPARE(window().chat().rowCount(), 2);
    QCOMPARE(last_turn().text, a.text);
    QCOMPARE(window().chat().conversation().turns.first().text, QString("Remember this."));
    // Going on in the reopened chat saves into the same file.
    send("And this.");
    QCOMPARE(list->count(), 1);
    QCOMPARE(window().chat().rowCount(), 4);
  }

  // The chat list (bug 10): one click opens a chat, repeated titles are numbered (oldest 1), Delete removes the
  // chat's file and, for the open one, leaves a new chat.
  void theChatListOpensOnOneClickNumbersRepeatsAndDeletes() {
    set_max_new_tokens(4);
    send("Same question");
    window().newChat();
    send("Same question");
    window().newChat();
    send("Another question");
    auto* list = child<QListWidget>("chat_list");
    QCOMPARE(list->count(), 3);
    QStringList titles;
    for (int i = 0; i < list->count(); ++i) titles << list->item(i)->text();
    QCOMPARE(titles, QStringList({"Another question", "Same question (2)", "Same question (1)"}));
    // One click on the oldest opens it.
    const QString oldest = list->item(2)->data(Qt::UserRole).toString();
    QTest::mouseClick(list->viewport(), Qt::LeftButton, {}, list->visualItemRect(list->item(2)).center());
    QCOMPARE(window().chat().conversation().id, oldest);
    // Delete, with the key on the list: the file goes, the list follows, the open chat becomes a new one.
    list->setCurrentItem(list->item(2));
    list->setFocus();
    QTest::keyClick(list, Qt::Key_Delete);
    QVERIFY(!QFile::exists(store_->path() + "/" + oldest + ".json"));
    QCOMPARE(list->count(), 2);
    QCOMPARE(list->item(1)->text(), QString("Same question"));  // no longer repeated
    QVERIFY(window().chat().conversation().id != oldest);
    QCOMPARE(window().chat().rowCount(), 0);
  }

  // Edit an earlier question and send it again: the chat is cut there and the new question answered as a fresh chat
  // with the same start answers it (the engine reuses its kept keys and values up to where the two differ).
  void anEarlierQuestionIsEditedAndResent() {
    set_max_new_tokens(8);
    send("What shapes do you see?", {shapes_image()});
    send("Which one is on the left?");
    send("And on the right?");
    QCOMPARE(window().chat().conversation().turns.size(), qsizetype(6));
    window().editQuestion(2);  // "Which one is on the left?"
    QCOMPARE(window().composer().text(), QString("Which one is on the left?"));
    window().composer().set_text("What colour is the circle?");
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    QTest::mouseClick(child<QPushButton>("send"), Qt::LeftButton);
    QVERIFY(finished.wait(60000));
    const auto& turns = window().chat().conversation().turns;
    QCOMPARE(turns.size(), qsizetype(4));
    QCOMPARE(turns[0].text, QString("What shapes do you see?"));
    QCOMPARE(turns[2].text, QString("What colour is the circle?"));
    const QString edited_answer = turns[3].text;
    QVERIFY(window().note() != MainWindow::kEditingNote);  // ended
    const qint64 kept = finished.first().first().value<Answer>().timing.cached_tokens;
    QVERIFY2(kept > 0, "the kept start of the chat was computed again");
    // The same chat asked afresh.
    window().newChat();
    send("What shapes do you see?", {shapes_image()});
    QCOMPARE(send("What colour is the circle?").text, edited_answer);
  }

  // The rest of #22 bug 10: rename in place (F2), search over titles and what was said, export as Markdown.
  void chatsAreRenamedSearchedAndExported() {
    set_max_new_tokens(4);
    send("What shapes do you see?");
    send("And which colour is the circle?");
    const QString first = window().chat().conversation().id;
    window().newChat();
    send("Tell me a story");
    auto* list = child<QListWidget>("chat_list");
    auto* panel = window_->findChild<ChatListPanel*>();
    QCOMPARE(panel->shown_titles(), QStringList({"Tell me a story", "What shapes do you see?"}));
    // The search looks at what was said, not only the titles; every word must be there.
    panel->set_search("colour");
    QCOMPARE(panel->shown_titles(), QStringList({"What shapes do you see?"}));
    panel->set_search("STORY tell");
    QCOMPARE(panel->shown_titles(), QStringList({"Tell me a story"}));
    panel->set_search("nothing like this");
    QVERIFY(panel->shown_titles().isEmpty());
    panel->set_search("");
    // F2 edits the title in place; Enter renames the chat in its file.
    list->setCurrentItem(list->item(1));
    list->setFocus();
    QTest::keyClick(list, Qt::Key_F2);
    QLineEdit* editor = nullptr;
    QTRY_VERIFY((editor = list->findChild<QLineEdit*>()) != nullptr);
    QCOMPARE(editor->text(), QString("What shapes do you see?"));
    editor->setText("Shapes and colours");
    QTest::keyClick(editor, Qt::Key_Return);
    QString error;
    auto stored_title = [&](const QString& id) {
      const auto chat = ChatStore(store_->path()).load(id, &error);
      return chat ? chat->title : "(unreadable: " + error + ")";
    };
    QTRY_COMPARE(stored_title(first), QString("Shapes and colours"));
    QVERIFY(panel->shown_titles().contains("Shapes and colours"));
    // The open chat renamed keeps its new title when it is saved again.
    window().newChat();
    const QString open_one = [&] {
      send("Another question");
      return window().chat().conversation().id;
    }();
    QVERIFY(window().renameChat(open_one, "Renamed while open"));
    send("And again?");
    QCOMPARE(stored_title(open_one), QString("Renamed while open"));
    // Export: the whole chat as Markdown, written whole.
    const QString md = store_->filePath("exported.md");
    QVERIFY(window().exportChat(first, md));
    QFile file(md);
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(file.readAll());
    QVERIFY2(text.startsWith("# Shapes and colours\n"), qPrintable(text));
    QCOMPARE(text.count("## You"), 2);
    QCOMPARE(text.count("## Assistant"), 2);
    QVERIFY(text.contains("And which colour is the circle?"));
    QVERIFY(!window().exportChat(first, store_->path() + "/no-such-folder/x.md"));
    QVERIFY(!QFile::exists(store_->path() + "/no-such-folder/x.md"));
  }

  // A long-time user's store: 1,000 saved chats of ten turns each. The window opens with all of them listed in under a
  // second (measured: docs/robustness.md), and the list refreshed after an answer parses only what changed.
  void aThousandSavedChatsOpenInUnderASecond() {
    QTemporaryDir many;
    {
      ChatStore writer(many.path());
      for (int i = 0; i < 1000; ++i) {
        Conversation c;
        c.title = QString("Chat %1").arg(i, 4, 10, QChar('0'));
        for (int t = 0; t < 10; ++t)
          c.turns.append({t % 2 ? "assistant" : "user", QString("Turn %1 of chat %2: ").arg(t).arg(i) + QString(300, 'x'),
                          {}, t % 2 ? "24 tokens · 0.2 s · cpu" : "", false});
        QString error;
        QVERIFY2(writer.save(c, &error), qPrintable(error));
      }
    }
    QElapsedTimer timer;
    timer.start();
    MainWindow window(many.path());
    const qint64 open_ms = timer.elapsed();
    QCOMPARE(window.findChild<QListWidget*>("chat_list")->count(), 1000);
    ChatStore store(many.path());
    timer.restart();
    store.list();  // cold: every file parsed
    const qint64 cold_ms = timer.elapsed();
    // Every file's title is changed behind the store's back, its size and modification time kept: a refresh that
    // parsed a file again would list the new title. (A ratio of the two reads' times, asserted here before, failed
    // in CI at 65 against 89 ms.)
    const QFileInfoList files = QDir(many.path()).entryInfoList({"*.json"}, QDir::Files);
    QCOMPARE(files.size(), qsizetype(1000));
    for (const QFileInfo& info : files) {
      const QDateTime modified = info.lastModified();  // (read before the write: QFileInfo reads it when first asked)
      QFile file(info.filePath());
      QVERIFY(file.open(QIODevice::ReadWrite));
      QByteArray bytes = file.readAll();
      QVERIFY2(bytes.contains("\"Chat "), qPrintable(info.fileName()));
      bytes.replace("\"Chat ", "\"Tale ");  // the same length
      QVERIFY(file.seek(0) && file.write(bytes) == bytes.size() && file.flush());
      QVERIFY(file.setFileTime(modified, QFileDevice::FileModificationTime));
    }
    timer.restart();
    const QList<ChatListing> again = store.list();
    const qint64 refresh_ms = timer.elapsed();
    QCOMPARE(again.size(), qsizetype(1000));
    for (const ChatListing& l : again) QVERIFY2(l.title.startsWith("Chat "), qPrintable(l.title + ": parsed again"));
    // A chat saved again (a new size and time) is parsed again, and only it.
    std::optional<Conversation> changed = store.load(again.back().id, nullptr);
    QVERIFY(changed);
    changed->title = "Renamed after the refresh";
    QString error;
    QVERIFY2(store.save(*changed, &error), qPrintable(error));
    const QList<ChatListing> after_save = store.list();
    QCOMPARE(after_save.size(), qsizetype(1000));
    QCOMPARE(after_save.front().title, QString("Renamed after the refresh"));  // newest first
    for (qsizetype i = 1; i < after_save.size(); ++i) QVERIFY(after_save[i].title.startsWith("Chat "));
    std::printf("1,000 chats: window open %lld ms, list read %lld ms cold, refreshed %lld ms\n", (long long)open_ms,
                (long long)cold_ms, (long long)refresh_ms);
#if QVL_SANITIZED_BUILD
    const qint64 limit_ms = 5000;  // the sanitizers slow parsing several times over
#else
    const qint64 limit_ms = 1000;
#endif
    QVERIFY2(open_ms < limit_ms, qPrintable(QString("the window took %1 ms to open 1,000 chats").arg(open_ms)));
  }

  // A full disk (simulated by a file-size limit: writes fail with EFBIG) while a chat is saved: the save reports it,
  // the chat's previous version stays whole, and no temporary file is left in the store.
  void aFullDiskKeepsThePreviousVersionOfAChat() {
    QTemporaryDir dir;
    ChatStore store(dir.path());
    Conversation chat;
    chat.turns.append({"user", "A short question.", {}, "", false});
    QString error;
    QVERIFY2(store.save(chat, &error), qPrintable(error));
    QFile saved(dir.path() + "/" + chat.id + ".json");
    QVERIFY(saved.open(QIODevice::ReadOnly));
    const QByteArray before = saved.readAll();
    saved.close();
    chat.turns.append({"assistant", QString(100000, 'y'), {}, "", false});
    rlimit old{};
    ::getrlimit(RLIMIT_FSIZE, &old);
    const auto previous = ::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 4096;
    ::setrlimit(RLIMIT_FSIZE, &small);
    const bool ok = store.save(chat, &error);
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, previous);
    QVERIFY2(!ok, "a save past the disk's end reported success");
    QVERIFY2(error.contains("cannot write"), qPrintable(error));
    QVERIFY(saved.open(QIODevice::ReadOnly));
    QCOMPARE(saved.readAll(), before);
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), qsizetype(1));
  }

  void fusedAndUnfusedAreComparedSideBySide() {
    set_max_new_tokens(6);
    child<PromptEdit>("prompt")->setPlainText("What is in the image?");
    window().composer().attach_files({shapes_image()});
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(1), 10000);
    auto* view = window().findChild<FusionView*>();
    window().findChild<QDockWidget*>("fusion_dock")->raise();
    const auto tables = view->findChildren<QTableWidget*>();
    QCOMPARE(tables.size(), qsizetype(2));
    for (auto* t : tables) QVERIFY(t->isHidden());  // no empty tables before there is something to show
    QSignalSpy done(&window().engine(), &EngineController::fusionCompared);
    QTest::mouseClick(child<QPushButton>("compare_fusion"), Qt::LeftButton);
    QVERIFY(done.wait(60000));
    QVERIFY2(view->verdict().startsWith("✔"), qPrintable(view->verdict()));
    QVERIFY(view->verdict().contains("identical"));
    QVERIFY(view->verdict().contains("Last decode step"));  // the decode kernels compared too
    // The CPU's fused ops give the unfused bits.
    QVERIFY2(view->verdict().contains("Each alone: add+rms_norm exact, linear q+k+v exact, linear+swiglu exact."),
             qPrintable(view->verdict()));
    // Only what the CPU has a kernel for is compared (bug 13: CUDA-only fusions were listed as compared and "exact").
    QVERIFY2(view->summary().startsWith("Fusions compared (median of 3 runs each way): add+rms_norm, linear q+k+v, "
                                        "linear+swiglu."),
             qPrintable(view->summary()));
    QVERIFY2(view->summary().contains("no fused kernel for them (it runs the reference either way): qk_norm+rope+append"),
             qPrintable(view->summary()));
    QVERIFY(view->kernel_rows() > 3);
    for (auto* t : tables) QVERIFY(!t->isHidden());
    QCOMPARE(window().engine().model().fusions, (QStringList{"add+rms_norm", "linear q+k+v", "qk_norm+rope+append", "linear+swiglu", "add+layer_norm",
                             "bias+gelu", "flash attention", "rms_norm+linear", "layer_norm+linear",
                             "head bounds+pick"}));  // left as it was
  }

  void aBadModelFolderIsExplained() {
    QTemporaryDir empty;
    QSignalSpy failed(&window().engine(), &EngineController::modelFailed);
    window().openModel(empty.path());
    QVERIFY(failed.wait(10000));
    QVERIFY2(window().notice().contains(empty.path()), qPrintable(window().notice()));
    QVERIFY2(window().notice().contains("config.json"), qPrintable(window().notice()));
    // What a model folder needs, and the working model kept (a bad folder once unloaded it: "No model open").
    QVERIFY2(window().notice().contains("Qwen3-VL-2B-Instruct"), qPrintable(window().notice()));
    QVERIFY2(window().notice().contains("stays open"), qPrintable(window().notice()));
    QVERIFY(window().engine().hasModel());
    set_max_new_tokens(3);
    QVERIFY(!send("Still there?").text.isEmpty());
  }

  void theGuiThreadStaysResponsiveWhileTheModelAnswers() {
    set_max_new_tokens(300);
    Heartbeat heartbeat;
    const Answer a = send("Write as much as you can about the picture.", {shapes_image()});
    heartbeat.stop();
    const qint64 worst = heartbeat.worst_ms();
    qInfo("heartbeat: worst gap %lld ms over %lld ms of generation (%lld tokens)", worst, heartbeat.elapsed_ms(),
          (long long)a.timing.generated_tokens);
#ifdef QVL_SANITIZED_BUILD
    // Sanitizers slow the GUI thread's own painting and layout several times over (38-73 ms measured here against
    // 12 ms in release): the bound is a release-build property, asserted there; this build checks the run for errors.
    if (worst > 50) QSKIP(qPrintable(QString("sanitizer build: worst gap %1 ms, the 50 ms bound is checked in release").arg(worst)));
#endif
    QVERIFY2(worst <= 50, qPrintable(QString("the GUI thread was blocked for %1 ms").arg(worst)));
  }

  // The context meter (#22 bug 11): the draft, its picture and the conversation counted before sending, exactly as
  // the engine then counts the prompt; after an answer the next draft counts the conversation too.
  void theContextMeterCountsWhatTheEngineWill() {
    auto* meter = child<ContextMeter>("context_meter");
    set_max_new_tokens(5);
    QMimeData dropped;
    dropped.setUrls({QUrl::fromLocalFile(shapes_image())});
    drop_onto(&window().composer(), dropped);
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(1), 10000);
    QSignalSpy counted(meter, &ContextMeter::counted);
    window().composer().set_text("What shapes do you see? Name each colour.");
    QVERIFY(counted.wait(5000));
    const ContextCount before = meter->last();
    QVERIFY2(before.fits(), qPrintable(before.problem));
    QVERIFY(before.image_tokens > 0);
    QCOMPARE(before.answer_tokens, qint64(5));
    QVERIFY2(meter->text().contains(QLocale().toString(before.prompt_tokens)), qPrintable(meter->text()));
    QVERIFY2(meter->text().contains(QLocale().toString(before.answer_tokens) + " for the answer"), qPrintable(meter->text()));
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    QTest::mouseClick(child<QPushButton>("send"), Qt::LeftButton);
    QVERIFY(finished.wait(30000));
    QCOMPARE(qint64(finished.first().first().value<Answer>().timing.prompt_tokens), before.prompt_tokens);
    // The follow-up's count holds the first turn and its answer: the engine's prompt for it is the same size.
    counted.clear();
    window().composer().set_text("And which one is larger?");
    QVERIFY(counted.wait(5000));
    const ContextCount next = meter->last();
    QVERIFY(next.prompt_tokens > before.prompt_tokens);
    const Answer follow_up = send("And which one is larger?");
    QCOMPARE(qint64(follow_up.timing.prompt_tokens), next.prompt_tokens);
  }

  // A question over the context is refused before anything changes: the text stays in the composer, no failed turn
  // (#22 bug 11: a 20,000-word prompt was refused after the composer was cleared).
  void aQuestionOverTheContextStaysInTheComposer() {
    QString words;
    for (int i = 0; i < 20000; ++i) words += QString(" word%1").arg(i % 97);
    auto* meter = child<ContextMeter>("context_meter");
    QSignalSpy counted(meter, &ContextMeter::counted);
    window().composer().set_text(words);
    QVERIFY(counted.wait(10000));
    QVERIFY(!meter->last().fits());
    QVERIFY2(meter->toolTip().contains("over the"), qPrintable(meter->toolTip()));
    QSignalSpy shown(&window(), &MainWindow::noticeShown);
    QTest::mouseClick(child<QPushButton>("send"), Qt::LeftButton);
    QTRY_COMPARE(shown.size(), 1);  // counted off the GUI thread
    QVERIFY2(window().notice().contains("tokens a request may hold"), qPrintable(window().notice()));
    QCOMPARE(window().composer().text(), words.trimmed());
    QVERIFY(window().chat().conversation().turns.isEmpty());
    QVERIFY(!window().engine().busy());
  }

  // A picture over the model's pixel limit is found when attached and offered scaled down, the numbers in words
  // (#22 bug 11: refused after sending, the limit as "67108864" pixels).
  void aPictureOverThePixelLimitIsOfferedScaledDown() {
    child<QSpinBox>("image_max_tokens")->setValue(256);  // the model's own budget is 16,384 tokens: minutes on a CPU
    // A PNG as it is, and a JPEG whose EXIF orientation turns it a quarter (a phone's photo): the offer and the copy
    // follow the picture as it shows.
    QImage image(9000, 8000, QImage::Format_RGB888);  // 72 M pixels, over 8192 x 8192
    image.fill(QColor(30, 90, 200));
    QPainter(&image).fillRect(QRect(0, 0, 3000, 8000), QColor(240, 200, 40));  // a band on the left, as stored
    const QString png = store_->filePath("wide.png"), jpeg = store_->filePath("turned.jpg");
    QVERIFY(image.save(png, "PNG", 10));
    QImageWriter writer(jpeg, "jpeg");
    writer.setTransformation(QImageIOHandler::TransformationRotate90);
    QVERIFY2(writer.write(image), qPrintable(writer.errorString()));
    for (const auto& [path, shown] : {std::pair{png, QSize(9000, 8000)}, {jpeg, QSize(8000, 9000)}}) {
      window().composer().clear();
      QMimeData dropped;
      dropped.setUrls({QUrl::fromLocalFile(path)});
      drop_onto(&window().composer(), dropped);
      QMessageBox* box = nullptr;
      QTRY_VERIFY_WITH_TIMEOUT((box = window_->findChild<QMessageBox*>("scale_down")) != nullptr, 20000);
      const QString size = QString("%1 × %2 pixels (72.0 M)").arg(shown.width()).arg(shown.height());
      QVERIFY2(box->text().contains(size), qPrintable(box->text()));
      QVERIFY2(box->text().contains("at most 67.1 M pixels"), qPrintable(box->text()));
      QVERIFY(window().composer().image_paths().isEmpty());
      box->button(QMessageBox::Yes)->click();
      QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), qsizetype(1), 60000);
      const QString copy = window().composer().image_paths().first();
      QVERIFY2(copy.startsWith(store_->path() + "/attachments/") && copy.endsWith(".jpg"), qPrintable(copy));
      // Named after the original, and its chip says so (a copy's chip once showed no name at all).
      const QString base = QFileInfo(path).completeBaseName();
      QCOMPARE(QFileInfo(copy).fileName(), base + " (scaled down).jpg");
      auto* chip = window().composer().findChild<AttachmentChip*>();
      QVERIFY(chip->findChild<QLabel*>("attachment_name")->text().startsWith(base));
      QVERIFY2(chip->toolTip().contains("scaled down from"), qPrintable(chip->toolTip()));
      QImageReader reader(copy);
      reader.setAutoTransform(true);
      const QImage scaled = reader.read();
      QVERIFY(qint64(scaled.width()) * scaled.height() <= qvl::ImageLimits{}.max_pixels);
      QVERIFY(qint64(scaled.width()) * scaled.height() > qvl::ImageLimits{}.max_pixels * 99 / 100);
      QVERIFY2(std::abs(double(scaled.width()) / scaled.height() - double(shown.width()) / shown.height()) < 0.002,
               qPrintable(QString("%1 x %2").arg(scaled.width()).arg(scaled.height())));
      // Not squashed: the band stored on the left is on the left as it shows (the JPEG: at the top, turned).
      const QColor band = path == png ? scaled.pixelColor(10, scaled.height() / 2) : scaled.pixelColor(scaled.width() / 2, 10);
      QVERIFY2(band.red() > 200 && band.blue() < 100, qPrintable(band.name()));
    }
    set_max_new_tokens(3);
    QSignalSpy finished(&window().engine(), &EngineController::answerFinished);
    QTest::mouseClick(child<QPushButton>("send"), Qt::LeftButton);
    QVERIFY(finished.wait(60000));
    QVERIFY(!last_turn().failed);
    QVERIFY(!finished.first().first().value<Answer>().text.isEmpty());
  }

  // #22 bug 4: the conversation is the main thing. On the CPU the performance panel starts collapsed; open, its
  // views share one tab group beside the chat, which keeps most of a 1280 x 820 window; the window can shrink to a
  // small laptop's screen.
  void theConversationIsTheMainThing() {
    window_.reset();
    QSettings().clear();
    window_ = std::make_unique<MainWindow>(store_->path());
    window_->show();
    window_->openModel(demo_model());
    QTRY_VERIFY_WITH_TIMEOUT(idle(), 30000);
    QCOMPARE(window_->size(), QSize(1280, 820));
    auto* panel = child<QAction>("performance_panel");
    QVERIFY(!panel->isChecked());  // the CPU: collapsed
    auto* chat = window_->findChild<ChatView*>();
    QTRY_VERIFY2(chat->width() >= 900, qPrintable(QString::number(chat->width())));
    panel->trigger();
    QVERIFY(QSettings().value("view/performance_panel").toBool());
    QTRY_VERIFY(window_->findChild<QDockWidget*>("kernels_dock")->isVisible());
    QTRY_VERIFY2(chat->width() >= 560, qPrintable(QString::number(chat->width())));
    // One tab group: the pool dock is not stacked under the others taking height.
    for (const char* name : {"throughput_dock", "pool_dock", "fusion_dock", "attention_dock"})
      QVERIFY2(window_->tabifiedDockWidgets(window_->findChild<QDockWidget*>("kernels_dock"))
                   .contains(window_->findChild<QDockWidget*>(name)), name);
    const QSize smallest = window_->minimumSizeHint();
    QVERIFY2(smallest.width() <= 1024 && smallest.height() <= 640,
             qPrintable(QString("%1 x %2").arg(smallest.width()).arg(smallest.height())));
    panel->trigger();  // and back: the chat takes the room again
    QTRY_VERIFY(chat->width() >= 900);
  }

  // The GPU's vital signs beside the throughput, and a warning while heat or power hold the clocks back: here from
  // a recording (no GPU on this machine; ctest turns NVML off for the ui tests, which the first check sees).
  void theGpuVitalSignsShowAndWarnWhenTheCardThrottles() {
    auto* view = window_->findChild<ThroughputView*>();
    QTRY_VERIFY2(view->vitals_text().startsWith("GPU vital signs: ") &&
                     view->vitals_text().contains("NVML is turned off ($QVL_NVML_LIBRARY is empty)"),
                 qPrintable(view->vitals_text()));
    window_.reset();
    qputenv("QVL_GPU_VITALS_RECORDING", QByteArray(QVL_SOURCE_DIR) + "/tests/ui/gpu-vitals-throttling.json");
    window_ = std::make_unique<MainWindow>(store_->path());  // the recording is opened on a worker: set until read
    window_->show();
    view = window_->findChild<ThroughputView*>();
    const QLocale l;
    QTRY_VERIFY2(view->vitals_text().startsWith(QString("NVIDIA GeForce MX350 (recorded): SM %1 MHz of %2 · memory %3 MHz · "
                                                        "94 °C · 25 W of 25 W · busy 99%")
                                                    .arg(l.toString(1404), l.toString(1468), l.toString(3504))),
                 qPrintable(view->vitals_text()));
    QVERIFY2(view->throttle_warning().startsWith("The GPU is slowing down (power cap, thermal slowdown (software))"),
             qPrintable(view->throttle_warning()));
    // Half a second later, the next sample: hotter, and the hardware slowing too.
    QTRY_VERIFY_WITH_TIMEOUT(view->vitals_text().contains("SM " + l.toString(1227) + " MHz"), 3000);
    QVERIFY2(view->throttle_warning().contains("thermal slowdown (hardware)"), qPrintable(view->throttle_warning()));
    qunsetenv("QVL_GPU_VITALS_RECORDING");
    // A real recording (the GPU machine's H200 during qvl bench): its clocks, and no warning.
    window_.reset();
    qputenv("QVL_GPU_VITALS_RECORDING", QByteArray(QVL_SOURCE_DIR) + "/tests/ui/gpu-vitals-h200.json");
    window_ = std::make_unique<MainWindow>(store_->path());  // the recording is opened on a worker: set until read
    window_->show();
    view = window_->findChild<ThroughputView*>();
    QTRY_VERIFY2(view->vitals_text().startsWith(QString("NVIDIA H200 (recorded): SM %1 MHz of %1 · memory %2 MHz · 38 °C · "
                                                        "123 W of 700 W")
                                                    .arg(l.toString(1980), l.toString(3201))),
                 qPrintable(view->vitals_text()));
    qunsetenv("QVL_GPU_VITALS_RECORDING");
    QVERIFY(view->throttle_warning().isEmpty());
  }

  // Sampling presets set the sampling fields in one choice, and the request samples as they say.
  void aSamplingPresetSetsTheFields() {
    auto* presets = child<QComboBox>("sampling_preset");
    presets->setCurrentIndex(2);  // Balanced
    emit presets->activated(2);
    QVERIFY(child<QCheckBox>("sample")->isChecked());
    QCOMPARE(child<QDoubleSpinBox>("temperature")->value(), 0.7);
    qvl::GenerateRequest request;
    window_->findChild<GenerationSettings*>()->apply(request);  // what a question is sent with
    QCOMPARE(request.sampling.temperature, 0.7);
    QCOMPARE(request.sampling.top_k, int64_t(20));
    QCOMPARE(request.sampling.top_p, 0.8);
    presets->setCurrentIndex(1);  // Precise
    emit presets->activated(1);
    QVERIFY(!child<QCheckBox>("sample")->isChecked());
    QCOMPARE(presets->currentIndex(), 0);  // back to "Choose a preset…": the fields are what counts
    QCOMPARE(QSettings().value("generation/sample").toBool(), false);  // saved like an edit
  }

  // Each chat keeps the settings it was asked with and shows them when it opens, without making them the defaults
  // (as its system prompt); a new chat starts from the defaults.
  void aChatKeepsItsOwnSettings() {
    set_max_new_tokens(3);
    send("Hello");  // greedy, 3 tokens
    const QString first = window().chat().conversation().id;
    window().newChat();
    child<QCheckBox>("sample")->setChecked(true);
    child<QDoubleSpinBox>("temperature")->setValue(1.3);
    set_max_new_tokens(7);  // edits: the new defaults
    send("Hello again");
    QVERIFY(window().openChat(first));
    QVERIFY(!child<QCheckBox>("sample")->isChecked());
    QCOMPARE(child<QSpinBox>("max_new_tokens")->value(), 3);
    QCOMPARE(QSettings().value("generation/max_new_tokens").toInt(), 7);  // the defaults untouched by opening it
    QVERIFY(QSettings().value("generation/sample").toBool());
    window().newChat();
    QVERIFY(child<QCheckBox>("sample")->isChecked());
    QCOMPARE(child<QDoubleSpinBox>("temperature")->value(), 1.3);
    QCOMPARE(child<QSpinBox>("max_new_tokens")->value(), 7);
    // Kept in the chat's file across a restart.
    QString error;
    const auto saved = ChatStore(store_->path()).load(first, &error);
    QVERIFY2(saved, qPrintable(error));
    QCOMPARE(saved->settings.value("max_new_tokens").toInt(), 3);
    // A chat saved before chats kept their settings: the defaults, and still its own system prompt.
    Conversation old_chat;
    old_chat.system_prompt = "Answer like a pirate.";
    old_chat.turns = {{"user", "Ahoy", {}, {}, false}};
    QVERIFY2(ChatStore(store_->path()).save(old_chat, &error), qPrintable(error));
    child<QPlainTextEdit>("system_prompt")->setPlainText("Be brief.");  // the default for new chats
    QVERIFY(window().openChat(old_chat.id));
    QCOMPARE(child<QPlainTextEdit>("system_prompt")->toPlainText(), QString("Answer like a pirate."));
    QCOMPARE(child<QSpinBox>("max_new_tokens")->value(), 7);  // the defaults
  }

  // Help ▸ About says what this is and what it runs on; the window has the app's icon; View ▸ Theme switches between
  // the desktop's look, light and dark, and the choice is kept.
  void theAboutBoxIconAndThemes() {
    QApplication::setApplicationVersion("9.8.7");
    child<QAction>("about")->trigger();
    QMessageBox* box = nullptr;
    QTRY_VERIFY((box = window_->findChild<QMessageBox*>("about_box")) != nullptr);
    QVERIFY2(box->text().contains("qvl-studio 9.8.7"), qPrintable(box->text()));
    QVERIFY2(box->informativeText().contains("Backends: CPU (in use)"), qPrintable(box->informativeText()));
    QVERIFY2(box->informativeText().contains(demo_model()), qPrintable(box->informativeText()));
    QVERIFY(!box->iconPixmap().isNull());
    box->close();
    QVERIFY(!window().windowIcon().isNull());
    QVERIFY(window().windowIcon().availableSizes().contains(QSize(48, 48)) ||
            !QIcon::fromTheme("qvl-studio").isNull());  // the installed theme's icon where there is one
    const QColor desktop = QApplication::palette().color(QPalette::Window);
    const QString desktop_style = QApplication::style()->name();
    child<QAction>("theme_dark")->trigger();
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 80);
    QCOMPARE(QSettings().value("view/theme").toString(), QString("dark"));
    window_.reset();  // kept for the next start
    window_ = std::make_unique<MainWindow>(store_->path());
    QVERIFY(child<QAction>("theme_dark")->isChecked());
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 80);
    child<QAction>("theme_light")->trigger();
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() > 180);
    child<QAction>("theme_system")->trigger();
    QCOMPARE(QApplication::palette().color(QPalette::Window), desktop);
    QCOMPARE(QApplication::style()->name(), desktop_style);
  }

  // #22 bug 14: the strip chart spans the answer's tokens (a 15-token answer was a sliver of a 300-token axis) and a
  // kernel's name shows whole (the head's was cut to "linear 15193…48").
  void theStripChartSpansTheAnswerAndKernelNamesShowWhole() {
    KernelView view;
    view.resize(420, 420);
    view.show();
    PerfSnapshot s;
    s.request_id = 7;
    for (int i = 0; i < 15; ++i) s.step_ms.push_back(2.0 + 0.1 * (i % 3));
    qvl::KernelSummary head;
    head.name = "linear 151936x2048 (bf16 weights, the output head)";
    head.calls = 15;
    head.total_ms = 3.0;
    head.share = 0.5;
    s.kernels = {head};
    view.update_from(s);
    QApplication::processEvents();
    const QImage chart = view.findChild<StepChart*>()->grab().toImage();
    const QColor line = view.palette().color(QPalette::Highlight);
    auto drawn_in = [&](int x0, int x1) {
      for (int x = x0; x < x1; ++x)
        for (int y = 0; y < chart.height(); ++y) {
          const QColor c = chart.pixelColor(x, y);
          if (std::abs(c.red() - line.red()) + std::abs(c.green() - line.green()) + std::abs(c.blue() - line.blue()) < 60)
            return true;
        }
      return false;
    };
    QVERIFY2(drawn_in(chart.width() * 80 / 100, chart.width() - 8), "the line stops short of the chart's right side");
    auto* table = view.findChild<QTableView*>("kernel_table");
    QVERIFY(table->horizontalHeader()->sectionSize(0) >=
            table->fontMetrics().horizontalAdvance(QString::fromStdString(head.name)));
  }

  // The kernel table's numbers change at most every 250 ms while tokens stream (its columns are sized to their
  // contents: each change measures every cell), the latest shown when the interval ends; new rows and an answer's
  // final snapshot show at once.
  void theKernelTableFollowsAStreamingAnswerAtAFewChangesASecond() {
    KernelView view;
    view.show();
    PerfSnapshot s;
    s.request_id = 3;
    qvl::KernelSummary k;
    k.name = "linear 2048x2048";
    k.total_ms = 1.0;
    s.kernels = {k};
    const auto shown = [&] { return view.table().kernels().empty() ? 0.0 : view.table().kernels()[0].total_ms; };
    QElapsedTimer since_shown;
    since_shown.start();
    view.update_from(s);
    QCOMPARE(shown(), 1.0);  // new rows: at once
    s.kernels[0].total_ms = 2.0;
    view.update_from(s);
    s.kernels[0].total_ms = 3.0;
    view.update_from(s);
    if (since_shown.elapsed() < 200) QCOMPARE(shown(), 1.0);  // within the interval: held back
    QTRY_COMPARE_WITH_TIMEOUT(shown(), 3.0, 2000);  // then the latest
    s.kernels[0].total_ms = 4.0;
    s.final = true;
    view.update_from(s);
    QCOMPARE(shown(), 4.0);  // the answer's last numbers: at once
  }

  // An 8000 x 8000 picture (the engine's limit allows 67 M pixels): its chip and bubble thumbnails are decoded off the
  // GUI thread and not refused by Qt's 128 MB image limit (the bubble once read "big8k.png (missing)" and typing
  // stalled ~0.4 s when its chip appeared), and the GUI thread stays responsive through a 2,000-token answer.
  void aHugePictureIsShownWithoutStallingTheGuiThread() {
    const QString big = store_->filePath("big8k.png");
    {
      QImage image(8000, 8000, QImage::Format_RGB888);
      image.fill(QColor(240, 240, 235));
      QPainter painter(&image);
      painter.setBrush(QColor(220, 60, 40));
      painter.drawEllipse(QRect(2000, 2000, 4000, 4000));
      painter.end();
      QVERIFY(image.save(big, "PNG", 10));
    }
#ifdef QVL_SANITIZED_BUILD
    set_max_new_tokens(48);  // the sanitizers slow decoding ten times over: the answer's length is not the point there
                             // (200 tokens took over the 60 s the answer is given, beside the picture's decodes)
#else
    set_max_new_tokens(2000);
#endif
    child<QSpinBox>("image_max_tokens")->setValue(256);  // the model's own budget is 16,384 tokens: minutes on a CPU
    Heartbeat heartbeat;
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(big)});
    drop_onto(&window().composer(), mime);
    QTRY_COMPARE_WITH_TIMEOUT(window().composer().image_paths().size(), 1, 60000);
    const QString kept = window().composer().image_paths().first();
    const Answer a = send("Write as much as you can about the picture.", {kept});
    auto* thumbnails = window_->findChild<PictureThumbnails*>();
    QVERIFY(thumbnails);
    QTRY_VERIFY_WITH_TIMEOUT(thumbnails->find(kept).has_value(), 60000);
    heartbeat.stop();
    QVERIFY(!a.text.isEmpty());
    const QPixmap thumb = *thumbnails->find(kept);
    QVERIFY2(!thumb.isNull(), "the bubble's picture could not be decoded");
    QCOMPARE(thumb.height(), 72);
    QCOMPARE(thumb.width(), 72);
    const qint64 worst = heartbeat.worst_ms();
    qInfo("heartbeat: worst gap %lld ms over %lld ms (attach, %lld tokens)", worst, heartbeat.elapsed_ms(),
          (long long)a.timing.generated_tokens);
#ifdef QVL_SANITIZED_BUILD
    if (worst > 50) QSKIP(qPrintable(QString("sanitizer build: worst gap %1 ms, the 50 ms bound is checked in release").arg(worst)));
#endif
    QVERIFY2(worst <= 50, qPrintable(QString("the GUI thread was blocked for %1 ms").arg(worst)));
  }
};

QTEST_MAIN(StudioTest)
#include "studio_test.moc"
