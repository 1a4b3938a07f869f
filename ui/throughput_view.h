#pragma once
// Time to first token, prefill and decode speed of the answer in progress and of the one before it.
#include <QWidget>

#include "ui/engine_types.h"

class QLabel;

namespace qvl::ui {

class ThroughputView : public QWidget {
  Q_OBJECT
public:
  explicit ThroughputView(QWidget* parent = nullptr);
  void update_from(const PerfSnapshot& s);

private:
  struct Column {
    QLabel *ttft, *prefill, *decode, *tokens;
  };
  static void fill(const Column& c, const PerfSnapshot& s);
  Column current_{}, last_{};
  PerfSnapshot latest_;
  quint64 current_id_ = 0;
};

}  // namespace qvl::ui
