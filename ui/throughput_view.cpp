#include "ui/throughput_view.h"

#include <QGridLayout>
#include <QLabel>

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
  grid->setRowStretch(5, 1);
}

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
