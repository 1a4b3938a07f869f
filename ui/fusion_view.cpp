#include "ui/fusion_view.h"

#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QTableWidget>
#include <QVBoxLayout>
#include <map>

namespace qvl::ui {

namespace {
QTableWidget* table(const QStringList& headers) {
  auto* t = new QTableWidget(0, int(headers.size()));
  t->setHorizontalHeaderLabels(headers);
  t->verticalHeader()->hide();
  t->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  return t;
}
void add_row(QTableWidget* t, const QString& name, double unfused, double fused, int decimals) {
  const int r = t->rowCount();
  t->insertRow(r);
  const QString ratio = fused > 0 ? QString("%1×").arg(unfused / fused, 0, 'f', 2) : QString("–");
  const QStringList cells{name, unfused > 0 ? QString::number(unfused, 'f', decimals) : "–",
                          fused > 0 ? QString::number(fused, 'f', decimals) : "–", ratio};
  for (int c = 0; c < cells.size(); ++c) {
    auto* item = new QTableWidgetItem(cells[c]);
    if (c > 0) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    t->setItem(r, c, item);
  }
}
double per_token(const FusionRun& r) { return r.timing.decode_ms / double(std::max<int64_t>(1, r.timing.decode_steps)); }
}  // namespace

FusionView::FusionView(QWidget* parent)
    : QWidget(parent), run_(new QPushButton("Compare fused and unfused")), summary_(new QLabel),
      verdict_(new QLabel), phases_(table({"", "Unfused", "Fused", "Speed-up"})),
      kernels_(table({"Kernel", "Unfused ms", "Fused ms", "Speed-up"})) {
  run_->setObjectName("compare_fusion");
  summary_->setWordWrap(true);
  verdict_->setWordWrap(true);
  verdict_->setObjectName("fusion_verdict");
  // Plain words first, the method after (the trial found the dock's wording hard and its empty tables puzzling: they
  // appear with the first comparison).
  summary_->setText("Answers the question in the message box (empty: the chat's last question again) twice, with the "
                    "fused kernels and with the unfused reference ops, and shows which is faster and whether the "
                    "answers agree; the chat itself is left as it is.\n\nHow: greedy; several runs each way, "
                    "interleaved, the median counted; one more each with per-kernel timing; then each fusion alone. "
                    "Only fusions this device has a kernel for are compared.");
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(run_);
  layout->addWidget(summary_);
  layout->addWidget(verdict_);
  layout->addWidget(phases_);
  layout->addWidget(kernels_, 1);
  // Docked, the tables once got one row each: the phases' three rows always show, and at least five kernels.
  auto rows_height = [](QTableWidget* t, int rows) {
    return t->horizontalHeader()->sizeHint().height() + rows * t->verticalHeader()->defaultSectionSize() +
           2 * t->frameWidth() + t->horizontalScrollBar()->sizeHint().height();  // a narrow dock scrolls sideways
  };
  phases_->setFixedHeight(rows_height(phases_, 3));
  kernels_->setMinimumHeight(rows_height(kernels_, 5));
  phases_->hide();
  kernels_->hide();
  layout->addStretch();  // what there is keeps to the top until the tables come
  connect(run_, &QPushButton::clicked, this, &FusionView::compareRequested);
}

void FusionView::show_comparison(const FusionComparison& c) {
  auto names = [](const std::vector<std::string>& list) {
    QStringList out;
    for (const auto& f : list) out << QString::fromStdString(f);
    return out.join(", ");
  };
  QString summary = QString("Fusions compared (median of %1 runs each way): %2.").arg(c.timed_runs).arg(names(c.fusions));
  if (!c.without_kernel.empty())
    summary += " Not compared, this device has no fused kernel for them (it runs the reference either way): " +
               names(c.without_kernel) + ".";
  summary_->setText(summary);
  const auto& d = c.difference;
  const bool ok = d.cosine >= 0.999 && d.same_tokens && (!c.decode_difference || c.decode_difference->cosine >= 0.999);
  QString text = QString("%1 First-step logits: max |Δ| %2, relative L2 %3, cosine %4; greedy answers %5.")
                     .arg(ok ? "✔" : "✘").arg(d.max_abs, 0, 'g', 3).arg(d.relative_l2, 0, 'g', 3)
                     .arg(d.cosine, 0, 'f', 7).arg(d.same_tokens ? "identical" : "differ");
  if (const auto& last = c.decode_difference)
    text += QString(" Last decode step: max |Δ| %1, relative L2 %2, cosine %3.")
                .arg(last->max_abs, 0, 'g', 3).arg(last->relative_l2, 0, 'g', 3).arg(last->cosine, 0, 'f', 7);
  // Each fusion alone against none: the unfused bits, or how far from them (first step; last decode step).
  QStringList each;
  for (const FusionEffect& e : c.each) {
    const double last = e.decode_difference ? e.decode_difference->relative_l2 : 0.0;
    const QString name = QString::fromStdString(e.name);
    if (!e.difference.same_tokens) each << name + " answers differently";
    else if (e.difference.relative_l2 == 0 && last == 0) each << name + " exact";
    else each << QString("%1 relative L2 %2 / %3").arg(name).arg(e.difference.relative_l2, 0, 'g', 2).arg(last, 0, 'g', 2);
  }
  if (!each.isEmpty()) text += " Each alone: " + each.join(", ") + ".";
  verdict_->setText(text);
  phases_->setRowCount(0);
  add_row(phases_, "Prefill ms", c.unfused.timing.prefill_ms, c.fused.timing.prefill_ms, 2);
  add_row(phases_, "Decode ms/token", per_token(c.unfused), per_token(c.fused), 3);
  add_row(phases_, "Kernel time ms (profiled)", c.unfused.kernel_ms, c.fused.kernel_ms, 2);
  std::map<std::string, std::pair<double, double>> by_name;
  for (const auto& k : c.unfused.kernels) by_name[k.name].first = k.total_ms;
  for (const auto& k : c.fused.kernels) by_name[k.name].second = k.total_ms;
  std::vector<std::pair<std::string, std::pair<double, double>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::max(a.second.first, a.second.second) > std::max(b.second.first, b.second.second);
  });
  kernels_->setRowCount(0);
  for (const auto& [name, t] : rows) add_row(kernels_, QString::fromStdString(name), t.first, t.second, 3);
  phases_->show();
  kernels_->show();
  auto* column = static_cast<QVBoxLayout*>(layout());
  column->setStretch(column->count() - 1, 0);  // the kernels' table takes the height now
}

void FusionView::show_error(const QString& error) { verdict_->setText("✘ " + error); }

void FusionView::set_running(bool running) {
  run_->setEnabled(!running);
  if (running) verdict_->setText("Running both ways…");
}

void FusionView::set_available(bool available, const QString& why) {
  run_->setEnabled(available);
  run_->setToolTip(why);
}

QString FusionView::verdict() const { return verdict_->text(); }
QString FusionView::summary() const { return summary_->text(); }
int FusionView::kernel_rows() const { return kernels_->rowCount(); }

}  // namespace qvl::ui
