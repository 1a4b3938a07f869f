#pragma once
// The sampling settings, the system prompt and the per-image token budget, starting from the model's
// generation_config.json; kept in QSettings between runs; "Model defaults" puts the model's values back.
#include <QJsonObject>
#include <QWidget>
#include <array>

#include "io/model_config.h"
#include "runtime/engine.h"

class QCheckBox;
class QDoubleSpinBox;
class QPlainTextEdit;
class QSpinBox;

namespace qvl::ui {

class GenerationSettings : public QWidget {
  Q_OBJECT
public:
  explicit GenerationSettings(QWidget* parent = nullptr);

  void set_model_defaults(const GenerationConfig& defaults);  // and restores saved values when the user changed them
  void reset_to_model_defaults();
  void apply(GenerateRequest& request) const;  // sampling, max new tokens, image budget
  QString system_prompt() const;
  // Shows a chat's system prompt without making it the default (the box's edits are saved as the default; opening
  // an old chat without one once wiped the default for every new chat).
  void show_system_prompt(const QString& text);
  QString default_system_prompt() const;  // what new chats start with
  // A chat's own sampling, token limit and image budget: what its last question was sent with (kept in the chat), and
  // shown again when it opens, as its system prompt is, without becoming the default; an empty object shows the
  // defaults (a new chat, or one saved before chats kept their settings).
  QJsonObject chat_settings() const;
  void show_chat_settings(const QJsonObject& settings);
  // The model's preprocessing with this panel's image budget (for the composer's token costs).
  PreprocessorConfig image_budget(const PreprocessorConfig& model) const;

  struct SamplingPreset {
    const char* name;
    bool sample;
    double temperature;
    int top_k;
    double top_p;
  };
  static const std::array<SamplingPreset, 3> kPresets;
  void apply_preset(const SamplingPreset& preset);  // saved like an edit of the fields

signals:
  void changed();

private:
  void save() const;
  void enable_sampling_fields();  // temperature, top-k and top-p matter only when sampling
  void load();

  QPlainTextEdit* system_;
  QCheckBox* sample_;
  QDoubleSpinBox *temperature_, *top_p_, *repetition_;
  QSpinBox *top_k_, *max_new_, *seed_, *min_tokens_, *max_tokens_;
  GenerationConfig defaults_;
  bool loading_ = false;
};

}  // namespace qvl::ui
