#pragma once
// The sampling settings, the system prompt and the per-image token budget, starting from the model's
// generation_config.json; kept in QSettings between runs; "Model defaults" puts the model's values back.
#include <QWidget>

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
  // The model's preprocessing with this panel's image budget (for the composer's token costs).
  PreprocessorConfig image_budget(const PreprocessorConfig& model) const;

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
