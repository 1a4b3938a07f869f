#pragma once
// The context meter: how many tokens the conversation, its pictures and the question being typed take, with the
// answer's room, against the most a request may hold (the model's context, or a GPU plan's room). It counts exactly as
// the engine will (runtime/prompt_count.h: the chat template, the tokenizer, each picture's tokens from its header),
// off the GUI thread after typing pauses; the same count decides, before a question is sent, whether it fits (a
// 20,000-word prompt was once refused only after the composer had been cleared, and became a failed turn).
#include <QLabel>

#include "ui/engine_types.h"

namespace qvl::ui {

struct ContextCount {
  qint64 prompt_tokens = 0;  // the whole prompt, its pictures included
  qint64 image_tokens = 0;
  qint64 answer_tokens = 0;  // the room asked for the answer (max new tokens)
  qint64 limit = 0;
  QString problem;  // empty when the request fits; else why not, with the numbers and what to do
  bool fits() const { return problem.isEmpty(); }
};

// Counts `request` (its images from image_paths) for `model`. Any thread.
ContextCount count_context(const PromptCounting& model, const ChatRequest& request);

class ContextMeter : public QLabel {
  Q_OBJECT
public:
  explicit ContextMeter(QWidget* parent = nullptr);
  // The draft as it would be sent, counted once typing has paused (the newest draft wins).
  void count_later(const PromptCounting& model, const ChatRequest& draft);
  void clear_count();  // no model
  const ContextCount& last() const { return last_; }

signals:
  void counted(const qvl::ui::ContextCount& count);

private:
  void show_count(const ContextCount& count);
  QTimer* pause_;
  PromptCounting model_;
  ChatRequest draft_;
  quint64 asked_ = 0;  // drafts given; a count of an older one is dropped
  ContextCount last_;
};

}  // namespace qvl::ui
