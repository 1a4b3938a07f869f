#include "ui/model_loader.h"

#include <QtConcurrent/QtConcurrentRun>

#include "io/model_folder.h"

namespace qvl::ui {

namespace {
QString summarise(const ModelFolder& m) {
  const auto& t = m.config.text;
  const auto& v = m.config.vision;
  return QString("Text decoder: %1 layers, hidden %2, %3 heads (%4 KV), vocabulary %5\n"
                 "Vision encoder: %6 blocks, hidden %7, patch %8, DeepStack at %9 blocks\n"
                 "Parameters: %10 million, %11 MiB of weights in %12 file(s)")
      .arg(t.num_hidden_layers).arg(t.hidden_size).arg(t.num_attention_heads).arg(t.num_key_value_heads)
      .arg(t.vocab_size).arg(v.depth).arg(v.hidden_size).arg(v.patch_size).arg(v.deepstack_visual_indexes.size())
      .arg(double(m.config.parameter_count()) / 1e6, 0, 'f', 1)
      .arg(double(m.checkpoint.total_bytes()) / (1 << 20), 0, 'f', 1)
      .arg(m.checkpoint.files().size());
}
}  // namespace

ModelLoader::ModelLoader(QObject* parent) : QObject(parent) {
  connect(&watcher_, &QFutureWatcher<Result>::finished, this, [this] {
    const Result r = watcher_.result();
    if (r.error.isEmpty()) emit loaded(r.folder, r.summary);
    else emit failed(r.folder, r.error);
  });
}

void ModelLoader::open(const QString& folder) {
  watcher_.setFuture(QtConcurrent::run([folder]() -> Result {
    try {
      return {folder, summarise(ModelFolder::open(folder.toStdString())), {}};
    } catch (const std::exception& e) {
      return {folder, {}, QString::fromStdString(e.what())};
    }
  }));
}

}  // namespace qvl::ui
