#include "ui/main_window.h"

#include <algorithm>

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QCloseEvent>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QProgressBar>
#include <QFutureWatcher>
#include <unistd.h>
#include <QTimer>
#include <QFile>
#include <QFileInfo>
#include <QMessageBox>
#include <QIcon>
#include <QActionGroup>
#include <QResizeEvent>
#include <QScrollArea>
#include <QtConcurrent/QtConcurrentRun>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QToolBar>
#include <QToolButton>
#include <QVBoxLayout>

#include "core/paths.h"
#include "ui/chat_export.h"
#include "ui/dialog_folder.h"
#include "ui/chat_list_panel.h"
#include "ui/chat_model.h"
#include "ui/chat_view.h"
#include "ui/composer.h"
#include "ui/context_meter.h"
#include "ui/engine_controller.h"
#include "ui/attention_panel.h"
#include "ui/fusion_view.h"
#include "ui/generation_settings.h"
#include "ui/theme.h"
#include "ui/gpu_vitals_poller.h"
#include "ui/kernel_view.h"
#include "ui/notice_bar.h"
#include "ui/pool_view.h"
#include "ui/throughput_view.h"
#include "ui/vulkan_views.h"
#if QVL_STUDIO_VULKAN
#include "ui/vulkan_heatmap_window.h"
#include "ui/vulkan_pool_window.h"
#endif

namespace qvl::ui {

namespace {

// Whether the backend the model runs on has a memory pool of its own to watch and cap.
bool has_device_memory(const ModelInfo& info) {
  const BackendChoice* b = info.current();
  return b && b->has_device_memory;
}

bool chat_has_pictures(const Conversation& chat) {
  return std::any_of(chat.turns.begin(), chat.turns.end(), [](const ChatTurn& t) { return !t.images.isEmpty(); });
}

constexpr int kRecentModels = 8;
const char* const kDemoModelNote =
    "This is the demo model: a 13M-parameter Qwen3-VL that qvl's project trained for eight minutes on pictures of "
    "circles, squares, triangles and stars (Help ▸ Try a sample picture). Ask what shapes it sees, how many "
    "there are, what colour the star is, where the circle is, what is at the top left, or whether the square is left of "
    "the triangle: it answered all 240 such questions about pictures it never saw right. It knows nothing else: other "
    "pictures and other questions get answers that sound sure and mean nothing. File ▸ Open model folder… opens a "
    "real Qwen3-VL-2B-Instruct download.";
const char* const kSm61Tip = "Run the Pascal (SM61) code path on this GPU: f32 weights on CUDA cores, our tiled GEMM";

QString answer_stats(const Answer& a) {
  const double seconds = (a.timing.preprocess_ms + a.timing.vision_ms + a.timing.prefill_ms + a.timing.decode_ms) / 1e3;
  const double decode_rate = a.timing.decode_ms > 0 ? double(a.timing.decode_steps) / (a.timing.decode_ms / 1e3) : 0;
  QString s = QString("%1 tokens · %2 s · %3 tokens/s · %4").arg(a.timing.generated_tokens).arg(seconds, 0, 'f', 2)
                  .arg(decode_rate, 0, 'f', 1).arg(a.device);
  // The sampler runs on the host between decode steps: shown, so a slow setting (top-k off) is seen.
  if (a.timing.generated_tokens > 0)
    s += QString(" · sampling %1 ms/token").arg(a.timing.sample_ms / double(a.timing.generated_tokens), 0, 'f', 2);
  if (a.stop_reason == "cancelled") s += " · stopped";
  else if (a.stop_reason == "max_new_tokens") s += " · hit the length limit";
  return s;
}
}  // namespace

MainWindow::MainWindow(const QString& store_dir, QWidget* parent)
    : QMainWindow(parent), engine_(new EngineController(this)), store_(store_dir), chat_(new ChatModel(this)),
      view_(new ChatView), composer_(new Composer), meter_(new ContextMeter), settings_(new GenerationSettings), throughput_(new ThroughputView),
      kernels_(new KernelView), pool_(new PoolView), attention_(new AttentionPanel), fusion_(new FusionView), chat_list_(new ChatListPanel),
      notices_(new NoticeBar), model_label_(new QLabel("No model")),
      progress_(new QProgressBar), device_(new QComboBox), fusions_(new QCheckBox("Fused kernels")),
      sm61_(new QCheckBox("SM61 profile")), weights_(new QComboBox) {
  setWindowTitle("qvl studio");
  setObjectName("main_window");
  view_->setModel(chat_);
  composer_->set_store(&store_);
  view_->setObjectName("chat_view");

  connect(notices_, &NoticeBar::noteClosed, this, [this] { end_editing(); });  // closing the note cancels an edit

  auto* central = new QWidget;
  auto* layout = new QVBoxLayout(central);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addWidget(notices_);
  layout->addWidget(view_, 1);
  layout->addWidget(composer_);
  setCentralWidget(central);

  progress_->setRange(0, 1000);
  progress_->setMaximumWidth(200);
  progress_->hide();
  statusBar()->addWidget(model_label_, 1);
  statusBar()->addPermanentWidget(progress_);

  device_->setObjectName("device");  // its items come from the engine's registry (apply_model)
  fusions_->setObjectName("fusions");
  sm61_->setObjectName("sm61");
  sm61_->setToolTip(kSm61Tip);
  fusions_->setToolTip("Use fused kernels (off: the unfused reference ops)");
  QSettings s;
  fusions_->setChecked(s.value("engine/fusions", true).toBool());
  sm61_->setChecked(s.value("engine/cuda_profile").toString() == "sm61");
  weights_->setObjectName("weights");
  weights_->setToolTip("How the weights are held: as the folder stores them, 8-bit, 4-bit, or auto (on a GPU: the most "
                       "precise whose memory plan keeps the decoder there); the model reloads");
  for (const auto& [label, id] : {std::pair{"As stored", "bf16"}, {"q8", "q8"}, {"q4", "q4"}, {"Auto", "auto"}})
    weights_->addItem(label, QString(id));
  weights_->setCurrentIndex(std::max(0, weights_->findData(s.value("engine/weights", "bf16").toString())));
  capacity_mib_ = s.value("engine/memory_limit_mib", 0).toLongLong();

  setWindowIcon(app_icon());
  build_actions();
  build_docks();
  connect_engine();
  build_vulkan_views();

  composer_->set_footer(meter_);
  connect(view_, &ChatView::editRequested, this, &MainWindow::editQuestion);
  connect(composer_, &Composer::draftChanged, this, &MainWindow::update_context_meter);
  connect(meter_, &ContextMeter::counted, this, [this](const ContextCount& count) {
    if (count.fits() && !context_error_.isEmpty() && notices_->error() == context_error_) notices_->hide_error();
  });
  connect(composer_, &Composer::sendRequested, this, &MainWindow::sendPrompt);
  connect(composer_, &Composer::stopRequested, this, &MainWindow::stop);
  connect(composer_, &Composer::attachmentRejected, this, [this](const QString& e) { show_notice(e, true); });
  connect(settings_, &GenerationSettings::changed, this, [this] {
    if (engine_->hasModel()) composer_->set_preprocessor(settings_->image_budget(engine_->model().preprocessor));
    update_context_meter();
  });
  connect(chat_list_, &ChatListPanel::openRequested, this, &MainWindow::openChat);
  connect(chat_list_, &ChatListPanel::deleteRequested, this, &MainWindow::deleteChat);
  connect(chat_list_, &ChatListPanel::renameRequested, this, &MainWindow::renameChat);
  connect(chat_list_, &ChatListPanel::exportRequested, this, [this](const QString& id) {
    QString error;
    const auto chat = chat_->conversation().id == id ? chat_->conversation() : store_.load(id, &error);
    if (!chat) return show_notice("Could not export the chat: " + error, true);
    // Named after the chat (the dialog once offered no name), in the folder of the last export.
    const QString folder = dialog_folder("chat/export_folder", QStandardPaths::DocumentsLocation);
    const QString path = QFileDialog::getSaveFileName(this, "Export the chat as Markdown",
                                                      QDir(folder).filePath(suggested_export_name(*chat)), "Markdown (*.md)");
    if (path.isEmpty()) return;
    remember_dialog_folder("chat/export_folder", path);
    export_loaded(*chat, path);
  });
  connect(device_, &QComboBox::activated, this, [this] {
    const QString device = device_->currentData().toString();
    // Next start: the CPU if that was chosen, else "auto" (the GPU if it is there).
    QSettings().setValue("engine/device", device == engine_->model().backends.value(0).id ? device : "auto");
    show_move_progress();
    engine_->setDevice(device);
  });
  connect(weights_, &QComboBox::activated, this, [this] {
    QSettings().setValue("engine/weights", weights_->currentData().toString());
    if (engine_->hasModel()) openModel(engine_->model().folder);
  });
  connect(fusions_, &QCheckBox::toggled, this, [this](bool on) {
    QSettings().setValue("engine/fusions", on);
    engine_->setFusions(on);
  });
  connect(sm61_, &QCheckBox::toggled, this, [this](bool on) {
    QSettings().setValue("engine/cuda_profile", on ? "sm61" : "auto");
    if (const BackendChoice* b = engine_->model().current(); b && b->has_profiles) show_move_progress();
    engine_->configureGpu(on ? "sm61" : "auto", capacity_mib_);
  });
  connect(pool_, &PoolView::capacityChosen, this, [this](qint64 mib) {
    capacity_mib_ = mib;
    QSettings().setValue("engine/memory_limit_mib", mib);
    show_move_progress();
    engine_->configureGpu(sm61_->isChecked() ? "sm61" : "auto", mib);
  });
  connect(fusion_, &FusionView::compareRequested, this, [this] {
    const ChatTurn typed{"user", composer_->text(), composer_->image_paths(), {}};
    QList<ChatTurn> turns = chat_->conversation().turns;
    while (!turns.isEmpty() && turns.last().role == "assistant") turns.removeLast();  // compare the next answer
    const bool have_typed = !typed.text.isEmpty() || !typed.images.isEmpty();
    if (!have_typed && turns.isEmpty()) {
      fusion_->show_error("Write a prompt (or open a chat) first: the comparison answers it both ways.");
      return;
    }
    fusion_->set_running(true);
    engine_->compareFusions(request_for(turns, have_typed ? &typed : nullptr));
  });

  // On the CPU, what matters there instead of a pool, once a second while the Memory dock shows (not read from
  // /proc while nobody looks), and at once when it comes into view.
  auto* cpu_timer = new QTimer(this);
  connect(cpu_timer, &QTimer::timeout, this, [this] {
    if (pool_in_view_) show_cpu_resources();
  });
  // (A tab of a dock group not in front still counts as visible to isVisible(); this signal tells.)
  connect(pool_dock_, &QDockWidget::visibilityChanged, this, [this](bool shown) {
    pool_in_view_ = shown;
    if (shown) show_cpu_resources();
  });
  cpu_timer->start(1000);

  // The GPU's vital signs beside the throughput (NVML; on a machine without it, the reason).
  vitals_ = new GpuVitalsPoller(this);
  connect(vitals_, &GpuVitalsPoller::sampled, throughput_, &ThroughputView::show_vitals);
  connect(vitals_, &GpuVitalsPoller::unavailable, throughput_, &ThroughputView::show_vitals_unavailable);
  vitals_->set_active(performance_->isChecked());  // sampled while the panel is open
  connect(performance_, &QAction::toggled, vitals_, &GpuVitalsPoller::set_active);
  vitals_->start();

  if (!reopen_last_chat()) newChat();
  refresh_chat_list();
  restoreGeometry(s.value("window/geometry").toByteArray());
  restoreState(s.value("window/state").toByteArray(), kLayoutVersion);
  if (s.value("window/geometry").isNull()) resize(1280, 820);
  // Until the user chooses, collapsed until a model opens on a GPU (modelLoaded).
  show_performance_panel(s.value("view/performance_panel", false).toBool());
  update_controls();
}

MainWindow::~MainWindow() {
  // The docks go with QWidget's destructor, after this one: hidden as they go, the pool dock would tell a window
  // that is no longer a MainWindow (UBSan caught it).
  pool_dock_->disconnect(this);
  if (!vulkan_) return;
  // The Vulkan views go before their device, in this order: the engine's thread (it may be drawing into the pool
  // channel; its worker drops the channel's imports into the backend), the window (its swapchain), the device.
  delete engine_;
  engine_ = nullptr;
  delete pool_vulkan_map_;
  delete attention_vulkan_view_;
}

void MainWindow::build_actions() {
  open_model_ = new QAction("&Open model folder…", this);
  open_model_->setShortcut(QKeySequence::Open);
  connect(open_model_, &QAction::triggered, this, [this] {
    // Beside the last model (where the others were likely downloaded), else the home folder.
    const QString last = QSettings().value("model/last").toString();
    const QString start = existing_or_home(last.isEmpty() ? QString() : QFileInfo(last).absolutePath());
    const QString folder = QFileDialog::getExistingDirectory(this, "Open a Qwen3-VL model folder", start);
    if (!folder.isEmpty()) openModel(folder);
  });
  new_chat_ = new QAction("&New chat", this);
  new_chat_->setShortcut(QKeySequence::New);
  connect(new_chat_, &QAction::triggered, this, &MainWindow::newChat);
  regenerate_ = new QAction("&Regenerate", this);
  regenerate_->setShortcut(Qt::CTRL | Qt::Key_R);
  connect(regenerate_, &QAction::triggered, this, &MainWindow::regenerate);
  stop_ = new QAction("&Stop", this);
  stop_->setShortcut(Qt::Key_Escape);
  stop_->setShortcutContext(Qt::WindowShortcut);
  connect(stop_, &QAction::triggered, this, &MainWindow::stop);
  addAction(stop_);
  time_kernels_ = new QAction("&Time kernels", this);
  time_kernels_->setCheckable(true);
  time_kernels_->setChecked(QSettings().value("view/time_kernels", true).toBool());
  connect(time_kernels_, &QAction::toggled, this, [this](bool on) {
    QSettings().setValue("view/time_kernels", on);
    engine_->setProfiling(on);
    kernels_->set_timing_enabled(on);
  });
  engine_->setProfiling(time_kernels_->isChecked());
  kernels_->set_timing_enabled(time_kernels_->isChecked());

  auto* file = menuBar()->addMenu("&File");
  file->addAction(open_model_);
  recent_menu_ = file->addMenu("Recent &models");
  file->addAction(new_chat_);
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);
  auto* chat = menuBar()->addMenu("&Chat");
  chat->addAction(regenerate_);
  chat->addAction(stop_);
  chat->addAction("Copy last &answer", this, [this] {
    const auto& turns = chat_->conversation().turns;
    if (!turns.isEmpty() && turns.last().role == "assistant") QApplication::clipboard()->setText(turns.last().text);
  });
  view_menu_ = menuBar()->addMenu("&View");
  performance_ = new QAction("&Performance panel", this);
  performance_->setObjectName("performance_panel");
  performance_->setCheckable(true);
  performance_->setShortcut(QKeySequence("Ctrl+Shift+P"));
  performance_->setToolTip("Show or hide the performance views (throughput, kernels, memory pool, fused vs unfused, "
                           "attention) beside the chat");
  view_menu_->addAction(performance_);
  view_menu_->addAction(time_kernels_);
  // Light, dark, or the desktop's own look, kept in the settings.
  auto* theme_menu = view_menu_->addMenu("&Theme");
  auto* themes = new QActionGroup(this);
  const QString theme = QSettings().value("view/theme", "system").toString();
  for (const auto& [name, label] : {std::pair{"system", "Follow the desktop"}, {"light", "Light"}, {"dark", "Dark"}}) {
    QAction* a = theme_menu->addAction(label);
    a->setObjectName(QString("theme_") + name);
    a->setCheckable(true);
    a->setChecked(theme == name);
    themes->addAction(a);
    connect(a, &QAction::triggered, this, [this, id = QString(name)] {
      QSettings().setValue("view/theme", id);
      apply_theme(id);
      notices_->restyle();
    });
  }
  apply_theme(theme);
  view_menu_->addSeparator();
  auto* help = menuBar()->addMenu("&Help");
  auto* about = help->addAction("&About qvl-studio", this, &MainWindow::show_about);
  about->setObjectName("about");
  help->addAction("About the &demo model", this, [this] {
    show_notice(kDemoModelNote, false);
  });
  auto* sample = help->addAction("Try a &sample picture", this, &MainWindow::try_sample_picture);
  sample->setObjectName("try_sample");
  rebuild_recent_menu();

  auto* bar = addToolBar("Main");
  bar->setObjectName("main_toolbar");
  bar->addAction(open_model_);
  bar->addAction(new_chat_);
  bar->addAction(regenerate_);
  bar->addAction(stop_);
  bar->addSeparator();
  bar->addWidget(new QLabel(" Device "));
  bar->addWidget(device_);
  bar->addWidget(fusions_);
  bar->addWidget(sm61_);
  bar->addWidget(new QLabel(" Weights "));
  bar->addWidget(weights_);
  bar->addSeparator();
  bar->addAction(performance_);
}

void MainWindow::build_vulkan_views() {
  connect(engine_, &EngineController::viewFeedFailed, this, [this](const QString& reason) {
    views_source_ = "Drawn by QPainter: " + reason;
    pool_->use_painter(reason);
    attention_->use_painter(reason);
  });
  connect(engine_, &EngineController::attentionHeat, attention_, &AttentionPanel::show_heat);
  connect(attention_, &AttentionPanel::viewChosen, engine_, &EngineController::setAttentionView);
#if QVL_STUDIO_VULKAN
  QString reason;
  if (qEnvironmentVariable("QVL_STUDIO_VULKAN") == "0") reason = "Vulkan is turned off ($QVL_STUDIO_VULKAN=0)";
  else vulkan_ = VulkanViews::create(&reason);
  views_source_ = vulkan_ ? vulkan_->source() : "Drawn by QPainter: " + reason;
  if (!vulkan_) {
    pool_->use_painter(reason);
    attention_->use_painter(reason);
    return;
  }
  auto* pool_window = new VulkanPoolWindow(*vulkan_);
  pool_vulkan_map_ = QWidget::createWindowContainer(pool_window);
  pool_vulkan_map_->setObjectName("pool_vulkan_map");
  pool_->set_vulkan_map(pool_vulkan_map_, vulkan_->source());
  connect(pool_window, &VulkanViewWindow::failed, pool_, &PoolView::use_painter);
  connect(pool_window, &VulkanViewWindow::frameWanted, engine_, &EngineController::publishPoolFrame);

  auto* heat_window = new VulkanHeatmapWindow(*vulkan_);
  attention_vulkan_view_ = QWidget::createWindowContainer(heat_window);
  attention_vulkan_view_->setObjectName("attention_vulkan_view");
  attention_->set_vulkan_view(attention_vulkan_view_, vulkan_->source());
  // Failing, the QPainter path needs the heat on the host: the feed stops taking it.
  connect(heat_window, &VulkanViewWindow::failed, this, [this](const QString& why) {
    attention_->use_painter(why);
    ViewFeed feed = vulkan_->view_feed();
    feed.publish_attention = nullptr;
    engine_->setViewFeed(feed);
  });
  connect(attention_, &AttentionPanel::pictureChosen, heat_window, &VulkanHeatmapWindow::set_picture);
  connect(heat_window, &VulkanViewWindow::frameShown, this, [this, heat_window] {
    const render::HeatFrameMeta m = heat_window->shown_meta();
    attention_->show_frame(int(m.grid_w), int(m.grid_h), m.layer, m.head);
  });
  engine_->setViewFeed(vulkan_->view_feed());
#else
  views_source_ = "Drawn by QPainter: qvl-studio was built without Vulkan";
  pool_->use_painter("qvl-studio was built without Vulkan");
  attention_->use_painter("qvl-studio was built without Vulkan");
#endif
}

void MainWindow::build_docks() {
  auto dock = [this](const QString& title, const QString& name, QWidget* w, Qt::DockWidgetArea area) {
    auto* d = new QDockWidget(title, this);
    d->setObjectName(name);
    d->setWidget(w);
    addDockWidget(area, d);
    view_menu_->addAction(d->toggleViewAction());
    return d;
  };
  // The conversation is the main thing (#22 bug 4: at 1280 x 820 the docks left it 400 px, and an empty Memory pool
  // dock took most of a tall window): the chats and the settings share one narrow tab group on the left, and the
  // performance views one tab group on the right, the performance panel, shown or hidden as one (open by default on
  // a GPU, collapsed on the CPU, until the user chooses).
  // The long forms scroll when the window is smaller than they are (the settings' form once held the whole window
  // at 892 px or more); the views holding Vulkan windows do not (a window container under a scroll area makes
  // every widget above it native).
  auto scrolled = [](QWidget* w) {
    auto* scroll = new QScrollArea;
    scroll->setWidget(w);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);  // the forms fit the panel's width; scroll down only
    return scroll;
  };
  auto* c = dock("Chats", "chats_dock", chat_list_, Qt::LeftDockWidgetArea);
  auto* g = dock("Generation", "generation_dock", scrolled(settings_), Qt::LeftDockWidgetArea);
  tabifyDockWidget(c, g);
  c->raise();
  chats_dock_ = c;
  auto* t = dock("Throughput", "throughput_dock", throughput_, Qt::RightDockWidgetArea);
  auto* k = dock("Kernels", "kernels_dock", kernels_, Qt::RightDockWidgetArea);
  // Short titles: five tabs share the panel's width, and longer ones were cut to "Throug…", "Memory …".
  auto* p = dock("Memory", "pool_dock", pool_, Qt::RightDockWidgetArea);
  auto* f = dock("Fusions", "fusion_dock", scrolled(fusion_), Qt::RightDockWidgetArea);
  auto* a = dock("Attention", "attention_dock", attention_, Qt::RightDockWidgetArea);
  performance_docks_ = {t, k, p, f, a};
  kernels_dock_ = k;
  pool_dock_ = p;
  for (QDockWidget* d : {k, p, f, a}) tabifyDockWidget(t, d);
  k->raise();
  resizeDocks({c}, {250}, Qt::Horizontal);
  resizeDocks({t}, {420}, Qt::Horizontal);
  connect(performance_, &QAction::triggered, this, [this](bool on) {
    QSettings().setValue("view/performance_panel", on);  // the user's choice, from now on
    show_performance_panel(on);
  });
}

// At 1024 x 640 with the panel open the chat once had 95 px of composer and the panel 60% of the window: when the
// chat has under half the width, the side docks give it back (the panel to 30% of the window, the chats to 20%, each
// no narrower than its contents allow). Queued, after Qt has laid the docks out at the new size.
void MainWindow::resizeEvent(QResizeEvent* event) {
  QMainWindow::resizeEvent(event);
  if (balancing_) return;
  balancing_ = true;
  QTimer::singleShot(0, this, [this] {
    balancing_ = false;
    keep_the_chat_wide();
  });
}

void MainWindow::keep_the_chat_wide() {
  const int w = width();
  if (centralWidget()->width() * 2 >= w) return;
  if (performance_->isChecked()) resizeDocks({performance_docks_.first()}, {w * 30 / 100}, Qt::Horizontal);
  // (isVisible is false for the Chats tab behind Generation; the tab group is shown all the same.)
  if (!chats_dock_->isHidden() && !chats_dock_->isFloating()) resizeDocks({chats_dock_}, {w * 20 / 100}, Qt::Horizontal);
}

void MainWindow::show_performance_panel(bool on) {
  performance_->setChecked(on);
  for (QDockWidget* d : performance_docks_) d->setVisible(on);
  if (on) kernels_dock_->raise();
}

void MainWindow::connect_engine() {
  connect(engine_, &EngineController::loadStarted, this, [this](const QString& folder) {
    model_label_->setText("Loading " + folder + " …");
    progress_->setValue(0);
    progress_->show();
  });
  connect(engine_, &EngineController::loadProgress, this, [this](double f) { progress_->setValue(int(f * 1000)); });
  connect(engine_, &EngineController::modelLoaded, this, [this](const ModelInfo& info) {
    progress_->hide();
    add_recent_model(info.folder);
    QSettings().setValue("model/last", info.folder);
    last_decode_tokens_per_s_ = 0;  // the rate was another model's or weights'

    const QJsonObject shown = settings_->chat_settings();  // what the panel shows now, edits not yet sent included
    settings_->set_model_defaults(info.generation);
    if (!chat_->conversation().settings.isEmpty()) settings_->show_chat_settings(shown);  // the open chat keeps its own
    apply_model(info);
    if (!QSettings().contains("view/performance_panel")) show_performance_panel(has_device_memory(info));
    notices_->hide_error();  // about the model before
    notices_->set_standing_note(info.demo ? kDemoModelNote : "");
  });
  connect(engine_, &EngineController::modelFailed, this, [this](const QString& folder, const QString& error, bool kept) {
    progress_->hide();
    if (!kept) model_label_->setText("No model open");
    show_notice("Could not open the model folder " + folder + ":\n" + error +
                    "\n\nA model folder is a Qwen3-VL model as Hugging Face has it (for example Qwen/Qwen3-VL-2B-Instruct): "
                    "config.json, tokenizer.json, preprocessor_config.json and the weights (*.safetensors)." +
                    (kept ? "\nThe model that was open stays open." : ""),
                true);
    update_controls();
  });
  connect(engine_, &EngineController::deviceChanged, this, [this](const ModelInfo& info) {
    last_decode_tokens_per_s_ = 0;  // the rate was another device's
    progress_->hide();
    apply_model(info);
  });
  connect(engine_, &EngineController::settingFailed, this, [this](const QString& e) { show_notice(e, true); });
  connect(engine_, &EngineController::busyChanged, this, [this] { update_controls(); });
  connect(engine_, &EngineController::textArrived, this, [this](quint64, const QString& text) { chat_->append_text(text); });
  connect(engine_, &EngineController::perfUpdated, this, [this](const PerfSnapshot& s) {
    if (s.decode_tokens_per_s > 0) last_decode_tokens_per_s_ = s.decode_tokens_per_s;
    throughput_->update_from(s);
    kernels_->update_from(s);
    pool_->update_from(s.memory, has_device_memory(engine_->model()));
    pool_->set_kept(s.conversations, s.pictures);
  });
  connect(engine_, &EngineController::answerFinished, this, [this](const Answer& a) {
    chat_->finish_last(answer_stats(a));
    save_chat();
  });
  connect(engine_, &EngineController::answerFailed, this, [this](quint64, const QString& error) {
    chat_->finish_last({}, true, "The answer failed: " + error);
    show_notice(error, true);
    save_chat();
  });
  connect(engine_, &EngineController::fusionCompared, this, [this](const FusionComparison& c) {
    fusion_->set_running(false);
    fusion_->show_comparison(c);
  });
  connect(engine_, &EngineController::fusionCompareFailed, this, [this](const QString& e) {
    fusion_->set_running(false);
    fusion_->show_error(e);
  });
}

void MainWindow::apply_model(const ModelInfo& info) {
  if (info.layers != attention_model_layers_ || info.heads != attention_model_heads_) {
    attention_model_layers_ = info.layers;
    attention_model_heads_ = info.heads;
    attention_->set_model(info.layers, info.heads);
  }
  model_label_->setText(QString("%1 — %2 · %3 · %4 weights").arg(info.folder, info.summary, info.backend, info.weights));
  composer_->set_preprocessor(settings_->image_budget(info.preprocessor));
  QSignalBlocker block(device_);
  if (device_->count() != info.backends.size()) {
    device_->clear();
    for (const BackendChoice& b : info.backends) device_->addItem(b.label, b.id);
  }
  device_->setCurrentIndex(device_->findData(info.device));
  update_controls();  // first: it tells the pool view whether a GPU can be chosen
  pool_->update_from(info.memory, has_device_memory(info));
  pool_->set_plan(info.memory_plan);
}

void MainWindow::update_controls() {
  const bool busy = engine_->busy() || checking_send_, model = engine_->hasModel();  // a Send being counted too
  const ModelInfo& info = engine_->model();
  composer_->set_busy(engine_->busy() && !engine_->loading());
  composer_->set_can_send(model && !busy);
  stop_->setEnabled(busy);
  new_chat_->setEnabled(!busy);
  open_model_->setEnabled(!busy);
  weights_->setEnabled(model && !busy);
  recent_menu_->setEnabled(!busy);
  chat_list_->setEnabled(!busy);
  const auto& turns = chat_->conversation().turns;
  regenerate_->setEnabled(model && !busy && !turns.isEmpty() && turns.last().role == "assistant");
  fusion_->set_available(model && !busy, model ? "" : "Open a model first");

  // The device toggle says why it is off: a backend that cannot be used (the engine's reason) or a GPU that failed
  // in this session.
  QString why_not;
  for (const BackendChoice& b : info.backends)
    if (!b.available) why_not = "No usable " + b.label + ": " + b.reason;
  if (why_not.isEmpty() && !info.device_error.isEmpty()) why_not = "The GPU failed in this session: " + info.device_error;
  device_->setEnabled(model && !busy && why_not.isEmpty());
  pool_->set_gpu_unavailable(why_not);
  throughput_->set_gpu_unavailable(why_not);
  device_->setToolTip(why_not.isEmpty() ? (info.fallback_reason.isEmpty() ? "Where the model runs" : "Started on the CPU: " + info.fallback_reason)
                                        : why_not);
  const bool profiles = std::any_of(info.backends.begin(), info.backends.end(),
                                    [](const BackendChoice& b) { return b.available && b.has_profiles; });
  const bool gpu_controls = model && !busy && why_not.isEmpty() && profiles;
  sm61_->setEnabled(gpu_controls);
  sm61_->setToolTip(why_not.isEmpty() ? QString(kSm61Tip) : why_not);
  fusions_->setEnabled(model && !busy);
  update_context_meter();  // a chat opened or answered, a model loaded: the count changes
}

void MainWindow::update_context_meter() {
  if (!engine_->hasModel()) return meter_->clear_count();
  const ChatTurn draft{"user", composer_->text(), composer_->image_paths(), {}, false};
  const auto& turns = chat_->conversation().turns;
  meter_->count_later(engine_->model().counting, request_for(editing_from_ >= 0 ? turns.mid(0, editing_from_) : turns, &draft));
}

void MainWindow::show_move_progress() {
  progress_->setValue(0);
  progress_->show();
  model_label_->setText("Moving the model …");
}

void MainWindow::show_notice(const QString& text, bool error) {
  if (error) notices_->show_error(text);
  else notices_->show_note(text);
  emit noticeShown(text);
}

// An error banner and a passing note ("Exported the chat to …") go when the user moves on (a new question, another
// chat); the standing note (the demo model's) stays. (Both once stayed through later answers and new chats.)
void MainWindow::hide_error_notice() {
  notices_->hide_error();
  notices_->end_passing_note();
}

QString MainWindow::notice() const { return notices_->error().isEmpty() ? notices_->note() : notices_->error(); }
QString MainWindow::note() const { return notices_->note(); }

EngineSettings MainWindow::settings_from_toggles() const {
  EngineSettings s;
  s.device = QSettings().value("engine/device", "auto").toString();
  s.cuda_profile = sm61_->isChecked() ? "sm61" : "auto";
  s.memory_limit_mib = capacity_mib_;
  s.weights = weights_->currentData().toString();
  s.fusions = fusions_->isChecked();
  return s;
}

void MainWindow::openModel(const QString& folder) {
  if (engine_->busy()) return;
  engine_->openModel(folder, settings_from_toggles());
  update_controls();
}

void MainWindow::add_recent_model(const QString& folder) {
  QSettings s;
  QStringList recent = s.value("model/recent").toStringList();
  recent.removeAll(folder);
  recent.prepend(folder);
  while (recent.size() > kRecentModels) recent.removeLast();
  s.setValue("model/recent", recent);
  rebuild_recent_menu();
}

void MainWindow::rebuild_recent_menu() {
  recent_menu_->clear();
  for (const QString& folder : QSettings().value("model/recent").toStringList())
    recent_menu_->addAction(folder, this, [this, folder] { openModel(folder); });
  recent_menu_->setEnabled(!recent_menu_->isEmpty());
}

void MainWindow::newChat() {
  if (engine_->busy()) return;
  Conversation c;
  c.system_prompt = settings_->default_system_prompt();
  settings_->show_system_prompt(c.system_prompt);
  settings_->show_chat_settings({});  // a new chat starts from the defaults
  chat_->set_conversation(c);
  chat_list_->set_open({});
  end_editing();
  QSettings().remove("chat/last");  // closed now, the app reopens on a new chat, as it was left
  composer_->clear();
  hide_error_notice();
  update_controls();
}

bool MainWindow::deleteChat(const QString& id) {
  if (engine_->busy()) return false;
  if (!store_.remove(id)) {
    show_notice("Could not delete the chat (its file is already gone or cannot be removed).", true);
    refresh_chat_list();
    return false;
  }
  if (chat_->conversation().id == id) newChat();
  refresh_chat_list();
  return true;
}

bool MainWindow::openChat(const QString& id) {
  if (engine_->busy()) return false;
  QString error;
  auto chat = store_.load(id, &error);
  if (!chat) {
    show_notice("Could not open the chat: " + error, true);
    return false;
  }
  show_chat(*chat);
  return true;
}

void MainWindow::show_chat(const Conversation& chat) {
  settings_->show_system_prompt(chat.system_prompt);
  settings_->show_chat_settings(chat.settings);  // its own, not made the default
  chat_->set_conversation(chat);
  chat_list_->set_open(chat.id);
  end_editing();
  QSettings().setValue("chat/last", chat.id);  // the app reopens on it
  hide_error_notice();
  update_controls();
}

// At start: the chat open when the app was last closed (it once always opened on a blank one). While the model
// loads the engine is busy, which openChat refuses, so the chat is read here directly; a chat gone or unreadable
// since gives a new one, quietly.
bool MainWindow::reopen_last_chat() {
  const QString id = QSettings().value("chat/last").toString();
  if (id.isEmpty()) return false;
  QString error;
  const auto chat = store_.load(id, &error);
  if (!chat) return false;
  show_chat(*chat);
  return true;
}

ChatRequest MainWindow::request_for(const QList<ChatTurn>& turns, const ChatTurn* extra_user) const {
  ChatRequest r;
  const QString system = settings_->system_prompt();
  if (!system.isEmpty()) r.request.messages.push_back(ChatMessage::text("system", system.toStdString()));
  auto add = [&](const ChatTurn& t) {
    if (t.failed) return;
    ChatMessage m{t.role.toStdString(), {}};
    for (const QString& path : t.images) {
      m.content.push_back(ContentItem::image());
      r.image_paths << path;
    }
    if (!t.text.isEmpty()) m.content.push_back(ContentItem::make_text(t.text.toStdString()));
    r.request.messages.push_back(std::move(m));
  };
  for (const ChatTurn& t : turns) add(t);
  if (extra_user) add(*extra_user);
  settings_->apply(r.request);
  return r;
}

void MainWindow::start_answer(const QList<ChatTurn>& context) {
  chat_->conversation_for_saving().settings = settings_->chat_settings();  // the chat keeps what it was answered with
  ChatRequest request = request_for(context, nullptr);
  if (!request.image_paths.isEmpty()) attention_->set_picture(request.image_paths.back());
  request.request.conversation_id = chat_->engine_key().toStdString();
  chat_->append({"assistant", {}, {}, {}, false});
  chat_->set_streaming(true);
  if (engine_->send(request) == 0) {
    chat_->finish_last({}, true, "The engine is busy or has no model.");
    return;
  }
  update_controls();
}

void MainWindow::sendPrompt(const QString& text, const QStringList& images) {
  if (engine_->busy() || !engine_->hasModel() || checking_send_) return;
  if (text.isEmpty() && images.isEmpty()) return;
  // Counted before anything changes, off the GUI thread (a long conversation is tokenised again and its pictures
  // sized from their headers): a question that does not fit stays in the composer, with the numbers.
  const ChatTurn draft{"user", text, images, {}, false};
  const QString chat_id = chat_->conversation().id;
  const qsizetype turns = chat_->conversation().turns.size();
  const int keep = editing_from_ >= 0 ? editing_from_ : int(turns);  // an edited question replaces it and what followed
  auto* watcher = new QFutureWatcher<ContextCount>(this);
  connect(watcher, &QFutureWatcher<ContextCount>::finished, this, [this, watcher, draft, chat_id, turns, keep] {
    watcher->deleteLater();
    checking_send_ = false;
    const ContextCount count = watcher->result();
    const bool same_chat = chat_->conversation().id == chat_id && chat_->conversation().turns.size() == turns;
    if (!same_chat || engine_->busy() || !engine_->hasModel()) return update_controls();  // it changed meanwhile
    if (!count.fits()) {
      show_notice(count.problem, true);
      context_error_ = count.problem;  // goes once the draft fits (the meter's next count)
      return update_controls();
    }
    Conversation& c = chat_->conversation_for_saving();
    c.system_prompt = settings_->system_prompt();
    c.model_folder = engine_->model().folder;
    chat_->truncate(keep);  // the engine's kept keys and values are reused up to where the two differ
    end_editing();
    chat_->append(draft);
    composer_->clear();
    hide_error_notice();  // about something before: this answer brings its own
    start_answer(chat_->conversation().turns);
  });
  checking_send_ = true;
  update_controls();  // Send waits for the count
  watcher->setFuture(
      QtConcurrent::run(count_context, engine_->model().counting, request_for(chat_->conversation().turns.mid(0, keep), &draft)));
}

// Resident memory (from /proc/self/statm), the weights' files (mapped where the CPU reads them), the threads, and the
// bandwidth the last answer's decode used (the bytes a step reads times its rate).
void MainWindow::show_cpu_resources() {
  const ModelInfo& info = engine_->model();
  if (!engine_->hasModel() || has_device_memory(info)) return pool_->show_cpu_resources({});
  const double mib = 1 << 20;
  QStringList parts;
  QFile statm("/proc/self/statm");
  if (const QStringList fields = statm.open(QIODevice::ReadOnly) ? QString(statm.readAll()).split(' ') : QStringList();
      fields.size() > 1)
    parts << QString("resident memory %1 MiB").arg(fields[1].toDouble() * double(sysconf(_SC_PAGESIZE)) / mib, 0, 'f', 0);
  const QString files = QString("%1 MiB").arg(double(info.weights_file_bytes) / mib, 0, 'f', 1);
  parts << (info.weights == "bf16" ? "the weights " + files + ", mapped from the model's files"
                                   : "the weights held as " + info.weights + " in memory (" + files + " of files)");
  parts << QString("%1 thread%2").arg(info.cpu_threads).arg(info.cpu_threads == 1 ? "" : "s");
  if (last_decode_tokens_per_s_ > 0)
    parts << QString("decode read %1 GB/s of weights (%2 MB a token at %3 tokens/s)")
                 .arg(double(info.decode_weight_bytes) * last_decode_tokens_per_s_ / 1e9, 0, 'f', 1)
                 .arg(double(info.decode_weight_bytes) / 1e6, 0, 'f', 1)
                 .arg(last_decode_tokens_per_s_, 0, 'f', 0);
  pool_->show_cpu_resources("On the CPU: " + parts.join(" · "));
}

QIcon MainWindow::app_icon() {
  QIcon icon;
  for (int size : {48, 128, 256}) icon.addFile(QString(":/icons/qvl-studio-%1.png").arg(size), QSize(size, size));
  return QIcon::fromTheme("qvl-studio", icon);  // the installed theme's, where the package put one
}

void MainWindow::show_about() {
  QStringList backends;
  for (const BackendChoice& b : engine_->model().backends)
    backends << b.label + (b.available ? (b.id == engine_->model().device ? " (in use)" : "") : ": " + b.reason);
  const QString revision = qApp->property("qvl_git_revision").toString();
  auto* box = new QMessageBox(this);
  box->setObjectName("about_box");
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setWindowTitle("About qvl-studio");
  box->setIconPixmap(app_icon().pixmap(96, 96));
  box->setText(QString("<b>qvl-studio %1</b>%2").arg(QApplication::applicationVersion(),
                                                   revision.isEmpty() ? QString() : " (git " + revision + ")"));
  box->setInformativeText(
      "Chat about pictures with a Qwen3-VL model on your own computer, offline, and watch what the GPU does while it "
      "answers.<br><br>Model: " + (engine_->hasModel() ? engine_->model().folder.toHtmlEscaped() : QString("none open")) +
      "<br>Backends: " + (backends.isEmpty() ? QString("–") : backends.join("; ").toHtmlEscaped()) +
      "<br>Views: " + views_source_.toHtmlEscaped() +
      "<br>Qt " + qVersion() + "; the engine's own CUDA kernels, cuBLAS, Vulkan, OpenCV, nlohmann/json.");
  box->setStandardButtons(QMessageBox::Close);
  box->open();
}

void MainWindow::editQuestion(int row) {
  const auto& turns = chat_->conversation().turns;
  if (engine_->busy() || checking_send_ || row < 0 || row >= turns.size() || turns[row].role != "user") return;
  editing_from_ = row;
  composer_->clear();
  composer_->set_text(turns[row].text);
  composer_->attach_files(turns[row].images);  // already in the chat's store: kept as they are, in their order
  show_notice(kEditingNote, false);
  update_context_meter();
}

const QString MainWindow::kEditingNote =
    "Editing an earlier question: sending it replaces it and everything after it (close this note to cancel).";

void MainWindow::end_editing() {
  if (editing_from_ < 0) return;
  editing_from_ = -1;
  notices_->end_note(kEditingNote);
  update_context_meter();
}

void MainWindow::regenerate() {
  end_editing();
  const auto& turns = chat_->conversation().turns;
  if (engine_->busy() || turns.isEmpty() || turns.last().role != "assistant") return;
  chat_->remove_last();
  start_answer(chat_->conversation().turns);
}

void MainWindow::stop() { engine_->stop(); }

void MainWindow::save_chat() {
  QString error;
  if (!store_.save(chat_->conversation_for_saving(), &error)) show_notice("The chat was not saved: " + error, true);
  else QSettings().setValue("chat/last", chat_->conversation().id);
  refresh_chat_list();
}

void MainWindow::refresh_chat_list() {
  chat_list_->set_chats(store_.list());
  chat_list_->set_open(chat_->conversation().id);
}

bool MainWindow::renameChat(const QString& id, const QString& title) {
  if (engine_->busy() || title.trimmed().isEmpty()) {
    if (engine_->busy()) show_notice("The chat was not renamed: wait for the answer to finish.", true);
    refresh_chat_list();  // the row shows the title as it is
    return false;
  }
  QString error;
  std::optional<Conversation> chat = chat_->conversation().id == id ? chat_->conversation() : store_.load(id, &error);
  if (chat) {
    chat->title = title.trimmed();
    if (store_.save(*chat, &error, ChatStore::Stamp::Keep)) {  // a rename is no new activity: the list order stays
      if (chat_->conversation().id == id) chat_->conversation_for_saving().title = chat->title;  // kept at the next save
      refresh_chat_list();
      return true;
    }
  }
  show_notice("Could not rename the chat: " + error, true);
  refresh_chat_list();
  return false;
}

bool MainWindow::exportChat(const QString& id, const QString& path) {
  QString error;
  const std::optional<Conversation> chat = chat_->conversation().id == id ? chat_->conversation() : store_.load(id, &error);
  if (chat) return export_loaded(*chat, path);
  show_notice("Could not export the chat: " + error, true);
  return false;
}

bool MainWindow::export_loaded(const Conversation& chat, const QString& path) {
  QString error;
  if (const QString written = export_chat_markdown(chat, path, &error); !written.isEmpty()) {
    show_notice("Exported the chat to " + written + (chat_has_pictures(chat) ? " (its pictures beside it)" : ""), false);
    return true;
  }
  show_notice("Could not export the chat: " + error, true);
  return false;
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  s.setValue("window/state", saveState(kLayoutVersion));
  engine_->stop();
  QMainWindow::closeEvent(event);
}

// The bundled pictures in turn, each with the README demo's question, ready to send.
void MainWindow::try_sample_picture() {
  end_editing();
  const QDir samples(QString::fromStdString((resource_dir() / "samples").string()));
  const QStringList pictures = samples.entryList({"*.png"}, QDir::Files, QDir::Name);
  if (pictures.isEmpty()) {
    show_notice("No sample pictures in " + samples.path(), true);
    return;
  }
  composer_->clear();
  composer_->attach_files({samples.filePath(pictures[next_sample_++ % pictures.size()])});
  composer_->set_text("What shapes do you see?");
}

}  // namespace qvl::ui
