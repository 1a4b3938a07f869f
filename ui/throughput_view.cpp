#include "ui/throughput_view.h"

#include <QGridLayout>
#include <QLabel>
#include <QLocale>

#include "ui/theme.h"

namespace qvl::ui {

ThroughputView::ThroughputView(QWidget* parent) : QWidget(parent) {
  auto* grid = new QGridLayout(this);
  const QStringList rows{"Time to first token", "Prefill", "Decode", "Tokens"};
  grid->addWidget(new QLabel("<b>This answer</b>"), 0, 1);
  grid->addWidget(new QLabel("<b>Last answer</b>"), 0, 2);
  for (int r = 0; r < rows.size(); ++r) grid->addWidget(new QLabel(rows[r]), r + 1, 0);
  for (Column* c : {&current_, &last_}) {
    const int col = c == &current_ ? 1 : 2;
    c->ttft = new QLabel("–");
    c->prefill = new QLabel("–");
    c->decode = new QLabel("–");
    c->tokens = new QLabel("–");
    QLabel* labels[] = {c->ttft, c->prefill, c->decode, c->tokens};
    for (int r = 0; r < 4; ++r) {
      labels[r]->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
      grid->addWidget(labels[r], r + 1, col);
    }
  }
  vitals_ = new QLabel("GPU: –");
  vitals_->setObjectName("gpu_vitals");
  vitals_->setWordWrap(true);
  throttle_ = new QLabel;
  throttle_->setObjectName("gpu_throttle_warning");
  throttle_->setWordWrap(true);
  throttle_->hide();
  grid->addWidget(vitals_, 5, 0, 1, 3);
  grid->addWidget(throttle_, 6, 0, 1, 3);
  grid->setRowStretch(7, 1);
}

void ThroughputView::show_vitals(const QString& device, const GpuVitals& v) {
  QString text = QString("%1: SM %2 MHz").arg(device).arg(QLocale().toString(v.sm_clock_mhz));
  if (v.max_sm_clock_mhz > 0) text += QString(" of %1").arg(QLocale().toString(v.max_sm_clock_mhz));
  text += QString(" · memory %1 MHz · %2 °C").arg(QLocale().toString(v.memory_clock_mhz)).arg(v.temperature_c);
  if (v.power_w > 0) {
    text += QString(" · %1 W").arg(v.power_w, 0, 'f', 0);
    if (v.power_limit_w > 0) text += QString(" of %1 W").arg(v.power_limit_w, 0, 'f', 0);
  }
  if (v.busy_reported) text += QString(" · busy %1%").arg(v.busy_percent);
  vitals_->setText(text);
  vitals_->setToolTip(QString("Clocks held back by: %1").arg([&] {
    QStringList names;
    for (const auto& n : throttle_names(v.throttle_reasons)) names << QString::fromStdString(n);
    return names.isEmpty() ? QString("nothing") : names.join(", ");
  }()));
  const bool slowed = throttles_work(v.throttle_reasons);
  throttle_->setStyleSheet("color: " + warning_colour() + "; font-weight: bold;");  // for the look in use
  throttle_->setVisible(slowed);
  if (slowed) {
    QStringList names;
    for (const auto& n : throttle_names(v.throttle_reasons & kSlowingReasons)) names << QString::fromStdString(n);
    throttle_->setText("The GPU is slowing down (" + names.join(", ") + "): answers come slower until it recovers. "
                       "A laptop's card often does this on battery or when warm.");
  }
}

void ThroughputView::show_vitals_unavailable(const QString& reason) {
  vitals_reason_ = reason;
  show_why_no_vitals();
}

void ThroughputView::set_gpu_unavailable(const QString& reason) {
  gpu_reason_ = reason;
  if (!vitals_reason_.isEmpty()) show_why_no_vitals();
}

// The same reason the Memory dock gives first (the trial saw NVML's "Driver Not Loaded" here and the CUDA
// plugin's reason there, and could not tell which was true); NVML's own words after it.
void ThroughputView::show_why_no_vitals() {
  vitals_->setText(gpu_reason_.isEmpty() ? "GPU vital signs: " + vitals_reason_
                                         : "GPU vital signs: none. " + gpu_reason_ + " (NVML: " + vitals_reason_ + ")");
  throttle_->hide();
}

QString ThroughputView::vitals_text() const { return vitals_->text(); }
QString ThroughputView::throttle_warning() const { return throttle_->isVisible() ? throttle_->text() : QString(); }

void ThroughputView::fill(const Column& c, const PerfSnapshot& s) {
  c.ttft->setText(s.tokens > 0 ? QString("%1 ms").arg(s.ttft_ms, 0, 'f', 1) : "–");
  const QString cached = s.cached_tokens > 0 ? QString(", %1 kept from the chat").arg(s.cached_tokens) : QString();
  c.prefill->setText(s.prefill_tokens_per_s > 0 ? QString("%1 tokens/s (%2 tokens%3)").arg(s.prefill_tokens_per_s, 0, 'f', 0).arg(s.prompt_tokens).arg(cached)
                                                : "–");
  c.decode->setText(s.decode_tokens_per_s > 0 ? QString("%1 tokens/s").arg(s.decode_tokens_per_s, 0, 'f', 1) : "–");
  c.tokens->setText(QString::number(s.tokens));
}

void ThroughputView::update_from(const PerfSnapshot& s) {
  if (s.request_id != current_id_ && current_id_ != 0 && latest_.final) fill(last_, latest_);  // a new answer began
  current_id_ = s.request_id;
  latest_ = s;
  fill(current_, s);
}

}  // namespace qvl::ui
