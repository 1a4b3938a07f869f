#pragma once
// qvl studio's window: the chat (transcript + composer) in the middle; docks for saved chats, generation settings,
// throughput, kernels, the memory pool and the fused-versus-unfused comparison; the device, fusion and profile
// toggles in the tool bar. Everything that runs the model goes through the EngineController (its own thread).
#include <QIcon>
#include <QMainWindow>
#include <QPointer>
#include <memory>

#include "ui/chat_store.h"
#include "ui/engine_types.h"

class QAction;
class QDockWidget;
class QCheckBox;
class QComboBox;
class QLabel;
class QMenu;
class QProgressBar;
class QToolButton;

namespace qvl::ui {

class VulkanViews;
class AttentionPanel;

class ChatModel;
class ChatView;
class ChatListPanel;
class Composer;
class GpuVitalsPoller;
class ContextMeter;
class EngineController;
class FusionView;
class GenerationSettings;
class KernelView;
class NoticeBar;
class PoolView;
class ThroughputView;

class MainWindow : public QMainWindow {
  Q_OBJECT
public:
  // `store_dir` empty: the app data folder's chats.
  explicit MainWindow(const QString& store_dir = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  void openModel(const QString& folder);
  void newChat();
  bool openChat(const QString& id);
  bool deleteChat(const QString& id);  // its file (the engine's kept keys age out); the open one gives a new chat
  bool renameChat(const QString& id, const QString& title);
  bool exportChat(const QString& id, const QString& path);  // as Markdown (Conversation::to_markdown), atomically
  // An earlier question of the open chat into the composer; sending it cuts the chat there and answers it anew.
  void editQuestion(int row);
  void show_about();  // Help ▸ About: the version, the model, the backends and how the views are drawn
  void show_cpu_resources();  // the Memory dock's line while the model is on the CPU
  void end_editing();  // an edit of an earlier question sent or cancelled
  static const QString kEditingNote;
  static QIcon app_icon();
  void sendPrompt(const QString& text, const QStringList& images);
  void regenerate();
  void stop();

  // For tests and scripts.
  EngineController& engine() const { return *engine_; }
  ChatModel& chat() const { return *chat_; }
  Composer& composer() const { return *composer_; }
  QString notice() const;  // the error banner's text, else the note's (empty: none shown)
  QString note() const;

signals:
  void noticeShown(const QString& text);

protected:
  void closeEvent(QCloseEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

private:
  void build_actions();
  void build_docks();
  void build_vulkan_views();  // the pool map drawn by Vulkan where it can be; QPainter (with the reason) elsewhere
  void connect_engine();
  void show_notice(const QString& text, bool error);
  void hide_error_notice();
  void show_chat(const Conversation& chat);
  bool reopen_last_chat();
  void show_move_progress();  // while weights move to another device or reload under new GPU settings
  void apply_model(const ModelInfo& info);
  void update_controls();
  void update_context_meter();  // the draft against the context, counted off the GUI thread
  void show_performance_panel(bool on);  // the performance views' docks, as one
  void keep_the_chat_wide();  // side docks narrowed when they leave the chat under half the window
  void refresh_chat_list();
  void save_chat();
  void add_recent_model(const QString& folder);
  void rebuild_recent_menu();
  EngineSettings settings_from_toggles() const;
  // The conversation as the engine's messages; `extra_user` (text and images) is appended as a new user turn.
  ChatRequest request_for(const QList<ChatTurn>& turns, const ChatTurn* extra_user) const;
  void start_answer(const QList<ChatTurn>& context);
  void try_sample_picture();
  bool export_loaded(const Conversation& chat, const QString& path);

  EngineController* engine_;
  ChatStore store_;
  ChatModel* chat_;
  ChatView* view_;
  Composer* composer_;
  ContextMeter* meter_;
  GpuVitalsPoller* vitals_ = nullptr;
  GenerationSettings* settings_;
  ThroughputView* throughput_;
  KernelView* kernels_;
  PoolView* pool_;
  AttentionPanel* attention_;
  std::unique_ptr<VulkanViews> vulkan_;
  QPointer<QWidget> pool_vulkan_map_;  // the Vulkan views' window containers (gone once QPainter took over)
  QPointer<QWidget> attention_vulkan_view_;
  int attention_model_layers_ = -1, attention_model_heads_ = -1;  // a model of another shape resets the choices
  FusionView* fusion_;
  ChatListPanel* chat_list_;
  NoticeBar* notices_;
  QString context_error_;  // the last "does not fit the context" error shown (it goes when the draft fits)
  QLabel* model_label_;
  QProgressBar* progress_;
  QComboBox* device_;
  QCheckBox* fusions_;
  QCheckBox* sm61_;
  QComboBox* weights_;  // as stored, q8, q4, auto: the model reloads with the choice
  QAction *regenerate_, *stop_, *new_chat_, *open_model_, *time_kernels_;
  QMenu* recent_menu_;
  QMenu* view_menu_;
  QAction* performance_ = nullptr;
  QList<QDockWidget*> performance_docks_;  // throughput, kernels, pool, fusion, attention
  QDockWidget* kernels_dock_ = nullptr;
  QDockWidget* pool_dock_ = nullptr;
  QDockWidget* chats_dock_ = nullptr;
  bool balancing_ = false;  // keep_the_chat_wide is queued
  bool pool_in_view_ = false;  // the Memory dock is shown (its tab in front)
  bool checking_send_ = false;  // a question's count against the context is running
  int editing_from_ = -1;       // the turn an edited question replaces (-1: none)
  QString views_source_;        // how the Vulkan views are drawn, or why QPainter draws them
  double last_decode_tokens_per_s_ = 0;
  // saveState()'s version: a layout saved by an older version is not restored (the docks were regrouped in 2).
  static constexpr int kLayoutVersion = 2;
  qint64 capacity_mib_ = 0;
  int next_sample_ = 0;  // Help > Try a sample picture goes through them in turn
};

}  // namespace qvl::ui
