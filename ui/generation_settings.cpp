#include "ui/generation_settings.h"

#include <QRandomGenerator>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QVBoxLayout>

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

const std::array<GenerationSettings::SamplingPreset, 3> GenerationSettings::kPresets{{
    {"Precise (greedy)", false, 0, 0, 1},
    {"Balanced (Qwen's: temperature 0.7, top-k 20, top-p 0.8)", true, 0.7, 20, 0.8},
    {"Creative (temperature 1.0, top-p 0.95)", true, 1.0, 0, 0.95},
}};

GenerationSettings::GenerationSettings(QWidget* parent)
    : QWidget(parent), system_(new QPlainTextEdit), sample_(new QCheckBox("Sample")),
      temperature_(real(0.01, 5, 0.05, 2)), top_p_(real(0.01, 1, 0.05, 2)), repetition_(real(0.5, 3, 0.05, 2)),
      top_k_(integer(0, 10000, "off")), max_new_(integer(1, 32768)), seed_(integer(0, 2147483647, "random")),
      min_tokens_(integer(0, 16384, "model's")), max_tokens_(integer(0, 16384, "model's")) {
  system_->setPlaceholderText("System prompt (optional)");
  system_->setMaximumHeight(80);
  auto* reset = new QPushButton("Model defaults");
  // Sampling presets: one choice sets the sampling fields (then as editable as ever).
  auto* presets = new QComboBox;
  presets->setObjectName("sampling_preset");
  presets->addItem("Choose a preset…");
  for (const SamplingPreset& p : kPresets) presets->addItem(p.name);
  presets->setToolTip("Precise: greedy, the most likely answer. Balanced: Qwen's recommended sampling for "
                      "Qwen3-VL-Instruct. Creative: warmer and wider.");
  // Sized to a few words, not to its longest item: the panel is narrow (the longest preset's text once set the form's
  // width, and at 1600 x 1000 the fields were cut off under a horizontal scroll bar).
  presets->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  presets->setMinimumContentsLength(10);
  connect(presets, &QComboBox::activated, this, [this, presets](int index) {
    if (index > 0) apply_preset(kPresets[size_t(index - 1)]);
    presets->setCurrentIndex(0);
  });
  auto* outer = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  form->setRowWrapPolicy(QFormLayout::WrapLongRows);  // a label above its field when the panel is narrower than both
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  outer->addLayout(form);
  outer->addStretch();  // the rows keep together at the top of a tall panel (they were spread over its height)
  form->addRow(system_);
  form->addRow("Preset", presets);
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
  sample_->setToolTip("On: each token drawn at random by the settings below. Off: greedy, always the most likely token");
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

void GenerationSettings::apply_preset(const SamplingPreset& p) {
  loading_ = true;
  sample_->setChecked(p.sample);
  if (p.sample) {
    temperature_->setValue(p.temperature);
    top_k_->setValue(p.top_k);
    top_p_->setValue(p.top_p);
  }
  repetition_->setValue(1.0);
  loading_ = false;
  enable_sampling_fields();
  save();
  emit changed();
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
  // Not the system prompt: the box shows the open chat's own (show_system_prompt), and a new chat's is the default.
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

QJsonObject GenerationSettings::chat_settings() const {
  return {{"sample", sample_->isChecked()},           {"temperature", temperature_->value()},
          {"top_k", top_k_->value()},                 {"top_p", top_p_->value()},
          {"repetition_penalty", repetition_->value()}, {"max_new_tokens", max_new_->value()},
          {"seed", seed_->value()},                   {"image_min_tokens", min_tokens_->value()},
          {"image_max_tokens", max_tokens_->value()}};
}

void GenerationSettings::show_chat_settings(const QJsonObject& chat) {
  if (chat.isEmpty()) {  // the defaults: the saved ones, or the model's
    if (QSettings().value("generation/customised").toBool()) load();
    else reset_to_model_defaults();
    return;
  }
  loading_ = true;  // shown, not saved as the default
  sample_->setChecked(chat.value("sample").toBool(sample_->isChecked()));
  temperature_->setValue(chat.value("temperature").toDouble(temperature_->value()));
  top_k_->setValue(chat.value("top_k").toInt(top_k_->value()));
  top_p_->setValue(chat.value("top_p").toDouble(top_p_->value()));
  repetition_->setValue(chat.value("repetition_penalty").toDouble(repetition_->value()));
  max_new_->setValue(chat.value("max_new_tokens").toInt(max_new_->value()));
  seed_->setValue(chat.value("seed").toInt(seed_->value()));
  min_tokens_->setValue(chat.value("image_min_tokens").toInt(min_tokens_->value()));
  max_tokens_->setValue(chat.value("image_max_tokens").toInt(max_tokens_->value()));
  loading_ = false;
  enable_sampling_fields();
  emit changed();
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
