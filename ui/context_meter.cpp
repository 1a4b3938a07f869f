#include "ui/context_meter.h"

#include <QFileInfo>
#include <QFutureWatcher>
#include <QLocale>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>

#include "runtime/prompt_count.h"
#include "ui/theme.h"

namespace qvl::ui {

namespace {
constexpr int kPauseMs = 250;  // typing pauses this long before the draft is counted
}  // namespace

ContextCount count_context(const PromptCounting& model, const ChatRequest& request) {
  ContextCount c;
  c.limit = model.context_tokens;
  c.answer_tokens = request.request.max_new_tokens;
  if (!model.tokenizer) {
    c.problem = "No model is open.";
    return c;
  }
  GenerateRequest r = request.request;
  if (const int64_t most = EngineOptions{}.max_images; request.image_paths.size() > most) {
    c.problem = QString("The conversation has %1 pictures; a request holds at most %2. Start a new chat for more.")
                    .arg(request.image_paths.size()).arg(most);
    return c;
  }
  for (const QString& path : request.image_paths) r.images.push_back(ImageInput::file(path.toStdString()));
  try {
    const PromptCount prompt = count_prompt(*model.tokenizer, model.preprocessor, TokenId(model.image_token_id), r);
    c.prompt_tokens = qint64(prompt.ids.size());
    for (int64_t t : prompt.tokens_per_image) c.image_tokens += t;
  } catch (const std::exception& e) {
    c.problem = QString::fromStdString(e.what());
    return c;
  }
  const QLocale l;
  const qint64 needed = c.prompt_tokens + (r.answer_fits_context ? 1 : c.answer_tokens);
  if (needed > c.limit)
    c.problem = QString("This question makes the conversation %1 tokens (%2 of them pictures); with %3 for the answer "
                        "that is %4, over the %5 tokens a request may hold. Shorten the question, start a new chat, or "
                        "lower \"Max new tokens\".")
                    .arg(l.toString(c.prompt_tokens), l.toString(c.image_tokens), l.toString(c.answer_tokens),
                         l.toString(needed), l.toString(c.limit));
  return c;
}

ContextMeter::ContextMeter(QWidget* parent) : QLabel(parent), pause_(new QTimer(this)) {
  setObjectName("context_meter");
  pause_->setSingleShot(true);
  pause_->setInterval(kPauseMs);
  connect(pause_, &QTimer::timeout, this, [this] {
    const quint64 asked = asked_;
    auto* watcher = new QFutureWatcher<ContextCount>(this);
    connect(watcher, &QFutureWatcher<ContextCount>::finished, this, [this, watcher, asked] {
      watcher->deleteLater();
      if (asked == asked_) show_count(watcher->result());
    });
    watcher->setFuture(QtConcurrent::run(count_context, model_, draft_));
  });
}

void ContextMeter::count_later(const PromptCounting& model, const ChatRequest& draft) {
  model_ = model;
  draft_ = draft;
  ++asked_;  // a count still running is of an older draft
  pause_->start();
}

void ContextMeter::clear_count() {
  pause_->stop();
  ++asked_;
  last_ = {};
  setText({});
  setToolTip({});
}

void ContextMeter::show_count(const ContextCount& count) {
  last_ = count;
  const QLocale l;
  const qint64 used = count.prompt_tokens + count.answer_tokens;
  if (count.prompt_tokens == 0 && !count.fits()) {  // not a matter of the context: a picture that cannot be read, ...
    setText("⚠ cannot be counted");
    setToolTip(count.problem);
    setStyleSheet("color: " + error_colour() + ";");
    emit counted(count);
    return;
  }
  // The answer's room in words ("+512" alone was explained only on hover, #22).
  setText(QString("%1 tokens + %2 for the answer, of %3").arg(l.toString(count.prompt_tokens), l.toString(count.answer_tokens),
                                                              l.toString(count.limit)));
  setToolTip(count.fits() ? QString("The conversation and this question: %1 tokens (%2 of them pictures); the answer "
                                    "may take %3 more (Max new tokens). A request holds at most %4.")
                                .arg(l.toString(count.prompt_tokens), l.toString(count.image_tokens),
                                     l.toString(count.answer_tokens), l.toString(count.limit))
                          : count.problem);
  const bool near = used * 10 > count.limit * 9;
  setStyleSheet(!count.fits() ? "color: " + error_colour() + "; font-weight: bold;"
                : near      ? "color: " + warning_colour() + ";"
                            : QString());
  emit counted(count);
}

}  // namespace qvl::ui
