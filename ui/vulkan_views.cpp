#include "ui/vulkan_views.h"

#include <QGuiApplication>
#include <QVulkanInstance>

#include "backend/cuda_plugin.h"
#include "render/pool_map_channel.h"
#include "render/vulkan_device.h"

namespace qvl::ui {

VulkanViews::~VulkanViews() {
  pool_channel_.reset();
  instance_.reset();  // Qt's wrapper of our instance (it does not destroy an adopted VkInstance)
  device_.reset();
}

std::unique_ptr<VulkanViews> VulkanViews::create(QString* reason) {
  const QString platform = QGuiApplication::platformName();
  if (platform == "offscreen" || platform == "minimal") {
    *reason = "the Qt platform \"" + platform + "\" has no windows for Vulkan to draw in";
    return nullptr;
  }
  try {
    render::DeviceRequest request;
    request.cuda_uuid = cuda_device_uuid(0);
    if (!request.cuda_uuid) request.no_cuda_reason = "no CUDA device (" + cuda_plugin().reason + ")";
    request.validation = qEnvironmentVariable("QVL_VULKAN_VALIDATION") == "1";
    request.instance_extensions = render::surface_extensions();
    request.presents = true;
    std::unique_ptr<VulkanViews> views(new VulkanViews);
    views->device_ = std::make_unique<render::VulkanDevice>(request);
    views->instance_ = std::make_unique<QVulkanInstance>();
    views->instance_->setVkInstance(views->device_->instance);
    if (!views->instance_->create()) {
      *reason = "Qt cannot use the Vulkan instance (error " + QString::number(views->instance_->errorCode()) + ")";
      return nullptr;
    }
    views->pool_channel_ =
        std::make_shared<render::PoolMapChannel>(*views->device_, views->device_->shares_memory_with_cuda());
    return views;
  } catch (const std::exception& e) {
    *reason = QString::fromStdString(e.what());
    return nullptr;
  }
}

QString VulkanViews::source() const {
  const QString name = QString::fromStdString(device_->name);
  if (device_->shares_memory_with_cuda()) return "Drawn by Vulkan on " + name + " from CUDA memory (no host copy)";
  return "Drawn by Vulkan on " + name + " from a host upload: " + QString::fromStdString(device_->interop_reason());
}

PoolFrameSink VulkanViews::pool_frame_sink() const {
  PoolFrameSink sink;
  const auto channel = pool_channel_;
  const auto cuda_uuid = cuda_device_uuid(0);
  sink.publish = [channel, cuda_uuid](Engine& engine) {
    const MemoryReport report = engine.memory_report(true);
    if (!report.available) return;  // the CPU has no pool (the view says so)
    DeviceInterop* facet = nullptr;
    if (channel->shared_with_cuda()) {
      const auto device = engine.device_identity();
      if (!device || !cuda_uuid || device->uuid != *cuda_uuid) return;  // not the GPU the memory lives on
      facet = engine.device_interop();
      if (!facet) return;
    }
    channel->publish(report, facet);
  };
  sink.forget_device = [channel] { channel->forget_imports(); };
  return sink;
}

}  // namespace qvl::ui
