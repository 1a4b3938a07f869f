#pragma once
// Where the model looks: while an answer streams, the attention of each new token to the latest picture's patches
// (one layer, one head or the mean of its heads), as heat over the picture. Drawn by Vulkan (VulkanHeatmapWindow:
// from memory CUDA writes on an NVIDIA GPU, from a host upload elsewhere) or, without Vulkan, by QPainter from the
// heat the engine's thread reads back; the line under it says which and why.
#include <QImage>
#include <QVector>
#include <QWidget>

class QComboBox;
class QLabel;

namespace qvl::ui {

// The QPainter drawing: the picture with each merged patch tinted by its heat.
class HeatPainter : public QWidget {
  Q_OBJECT
public:
  using QWidget::QWidget;
  void set_picture(const QImage& picture);
  void set_heat(const QVector<float>& heat, int grid_w, int grid_h);
  QSize sizeHint() const override { return {320, 240}; }

protected:
  void paintEvent(QPaintEvent* event) override;

private:
  QImage picture_;
  QVector<float> heat_;
  int grid_w_ = 0, grid_h_ = 0;
};

class AttentionPanel : public QWidget {
  Q_OBJECT
public:
  explicit AttentionPanel(QWidget* parent = nullptr);
  void set_model(int layers, int heads);        // what the choices offer (a new model resets them)
  void set_picture(const QString& path);        // the latest picture of the request being answered
  void set_vulkan_view(QWidget* view, const QString& source);
  void use_painter(const QString& reason);
  void show_heat(const QVector<float>& heat, int grid_w, int grid_h, qint64 layer, qint64 head);  // QPainter path
  void show_frame(int grid_w, int grid_h, qint64 layer, qint64 head);  // what the shown frame is (both paths)

signals:
  // layer -1: off. Also off while the panel is hidden (a dock tabbed behind another): the tap costs nothing then.
  void viewChosen(qint64 layer, qint64 head);
  void pictureChosen(const QString& path);      // for the Vulkan window

protected:
  void showEvent(QShowEvent* event) override;
  void hideEvent(QHideEvent* event) override;

private:
  void emit_choice();

  QComboBox* layer_;
  QComboBox* head_;
  QLabel* status_;
  QLabel* source_;
  HeatPainter* painter_;
  QWidget* vulkan_view_ = nullptr;
};

}  // namespace qvl::ui
