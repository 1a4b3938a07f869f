#include "ui/generation_settings.h"

#include <QRandomGenerator>

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>

#include "vision/preprocess.h"

namespace qvl::ui {

namespace {
QDoubleSpinBox* real(double lo, double hi, double step, int decimals) {
  auto* s = new QDoubleSpinBox;
  s->setRange(lo, hi);
  s->setSingleStep(step);
  s->setDecimals(decimals);
  return s;
}
QSpinBox* integer(int lo, int hi, const QString& zero_means = {}) {
  auto* s = new QSpinBox;
  s->setRange(lo, hi);
  if (!zero_means.isEmpty()) s->setSpecialValueText(zero_means);
  return s;
}
}  // namespace

GenerationSettings::GenerationSettings(QWidget* parent)
    : QWidget(parent), system_(new QPlainTextEdit), sample_(new QCheckBox("Sample (off: greedy, always the most likely token)")),
      temperature_(real(0.01, 5, 0.05, 2)), top_p_(real(0.01, 1, 0.05, 2)), repetition_(real(0.5, 3, 0.05, 2)),
      top_k_(integer(0, 10000, "off")), max_new_(integer(1, 32768)), seed_(integer(0, 2147483647, "random")),
      min_tokens_(integer(0, 16384, "model's")), max_tokens_(integer(0, 16384, "model's")) {
  system_->setPlaceholderText("System prompt (optional)");
  system_->setMaximumHeight(80);
  auto* reset = new QPushButton("Model defaults");
  auto* form = new QFormLayout(this);
  form->addRow(system_);
  form->addRow(sample_);
  form->addRow("Temperature", temperature_);
  form->addRow("Top-k", top_k_);
  form->addRow("Top-p", top_p_);
  form->addRow("Repetition penalty", repetition_);
  form->addRow("Max new tokens", max_new_);
  form->addRow("Seed", seed_);
  form->addRow("Image min tokens", min_tokens_);
  form->addRow("Image max tokens", max_tokens_);
  form->addRow(reset);
  sample_->setObjectName("sample");
  max_new_->setObjectName("max_new_tokens");
  max_tokens_->setObjectName("image_max_tokens");
  temperature_->setObjectName("temperature");
  seed_->setObjectName("seed");
  system_->setObjectName("system_prompt");
  seed_->setToolTip("random: a new seed for every answer (Regenerate samples another one); a number: the same answer "
                    "again for the same conversation");
  connect(reset, &QPushButton::clicked, this, &GenerationSettings::reset_to_model_defaults);
  auto notify = [this] {
    if (loading_) return;
    enable_sampling_fields();
    save();
    emit changed();
  };
  connect(sample_, &QCheckBox::toggled, this, notify);
  for (auto* s : {temperature_, top_p_, repetition_}) connect(s, &QDoubleSpinBox::valueChanged, this, notify);
  for (auto* s : {top_k_, max_new_, seed_, min_tokens_, max_tokens_}) connect(s, &QSpinBox::valueChanged, this, notify);
  connect(system_, &QPlainTextEdit::textChanged, this, [this] {
    if (!loading_) save();
  });
}

void GenerationSettings::enable_sampling_fields() {
  for (QWidget* w : std::initializer_list<QWidget*>{temperature_, top_k_, top_p_}) w->setEnabled(sample_->isChecked());
}

void GenerationSettings::set_model_defaults(const GenerationConfig& defaults) {
  defaults_ = defaults;
  if (QSettings().value("generation/customised").toBool()) load();
  else reset_to_model_defaults();
}

void GenerationSettings::reset_to_model_defaults() {
  loading_ = true;
  sample_->setChecked(defaults_.do_sample);
  temperature_->setValue(defaults_.temperature);
  top_k_->setValue(int(defaults_.top_k));
  top_p_->setValue(defaults_.top_p);
  repetition_->setValue(defaults_.repetition_penalty);
  max_new_->setValue(defaults_.max_new_tokens > 0 ? int(defaults_.max_new_tokens) : 512);
  seed_->setValue(0);
  min_tokens_->setValue(0);
  max_tokens_->setValue(0);
  loading_ = false;
  enable_sampling_fields();
  QSettings().setValue("generation/customised", false);
  emit changed();
}

void GenerationSettings::save() const {
  QSettings s;
  s.beginGroup("generation");
  s.setValue("customised", true);
  s.setValue("sample", sample_->isChecked());
  s.setValue("temperature", temperature_->value());
  s.setValue("top_k", top_k_->value());
  s.setValue("top_p", top_p_->value());
  s.setValue("repetition_penalty", repetition_->value());
  s.setValue("max_new_tokens", max_new_->value());
  s.setValue("seed", seed_->value());
  s.setValue("image_min_tokens", min_tokens_->value());
  s.setValue("image_max_tokens", max_tokens_->value());
  s.setValue("system_prompt", system_->toPlainText());
}

void GenerationSettings::load() {
  loading_ = true;
  QSettings s;
  s.beginGroup("generation");
  sample_->setChecked(s.value("sample", defaults_.do_sample).toBool());
  temperature_->setValue(s.value("temperature", defaults_.temperature).toDouble());
  top_k_->setValue(s.value("top_k", int(defaults_.top_k)).toInt());
  top_p_->setValue(s.value("top_p", defaults_.top_p).toDouble());
  repetition_->setValue(s.value("repetition_penalty", defaults_.repetition_penalty).toDouble());
  max_new_->setValue(s.value("max_new_tokens", 512).toInt());
  seed_->setValue(s.value("seed", 0).toInt());
  min_tokens_->setValue(s.value("image_min_tokens", 0).toInt());
  max_tokens_->setValue(s.value("image_max_tokens", 0).toInt());
  system_->setPlainText(s.value("system_prompt").toString());
  loading_ = false;
  enable_sampling_fields();
  emit changed();
}

void GenerationSettings::apply(GenerateRequest& r) const {
  r.sampling = {};
  if (sample_->isChecked()) {
    r.sampling.temperature = temperature_->value();
    r.sampling.top_k = top_k_->value();
    r.sampling.top_p = top_p_->value();
  }
  r.sampling.repetition_penalty = repetition_->value();
  // 0 is "random": each answer its own seed, so Regenerate with sampling gives another answer (it once gave the same).
  r.sampling.seed = seed_->value() > 0 ? uint64_t(seed_->value()) : QRandomGenerator::global()->generate64();
  r.max_new_tokens = max_new_->value();
  r.image_min_tokens = min_tokens_->value();
  r.image_max_tokens = max_tokens_->value();
}

QString GenerationSettings::system_prompt() const { return system_->toPlainText().trimmed(); }
void GenerationSettings::show_system_prompt(const QString& text) {
  loading_ = true;  // a chat's own prompt: shown, not made the default for new chats
  system_->setPlainText(text);
  loading_ = false;
}

QString GenerationSettings::default_system_prompt() const {
  return QSettings().value("generation/system_prompt").toString().trimmed();
}

PreprocessorConfig GenerationSettings::image_budget(const PreprocessorConfig& model) const {
  try {
    return with_token_budget(model, min_tokens_->value(), max_tokens_->value());
  } catch (const std::exception&) {
    return model;  // max below min: the request says so when it is sent
  }
}

}  // namespace qvl::ui
