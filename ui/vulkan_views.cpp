#include "ui/vulkan_views.h"

#include <QGuiApplication>
#include <QVulkanInstance>

#include "backend/cuda_plugin.h"
#include "render/heat_channel.h"
#include "render/pool_map_channel.h"
#include "render/vulkan_device.h"

namespace qvl::ui {

VulkanViews::~VulkanViews() {
  pool_channel_.reset();
  heat_channel_.reset();
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
    const bool shared = views->device_->shares_memory_with_cuda();
    views->pool_channel_ = std::make_shared<render::PoolMapChannel>(*views->device_, shared);
    views->heat_channel_ = std::make_shared<render::HeatChannel>(*views->device_, shared);
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

ViewFeed VulkanViews::view_feed() const {
  // The facet of the engine's backend, when the channels' memory lives on its GPU (else frames that need it drop).
  const auto cuda_uuid = cuda_device_uuid(0);
  const bool shared = device_->shares_memory_with_cuda();
  auto facet_of = [cuda_uuid, shared](Engine& engine) -> DeviceInterop* {
    if (!shared) return nullptr;
    const auto device = engine.device_identity();
    return device && cuda_uuid && device->uuid == *cuda_uuid ? engine.device_interop() : nullptr;
  };
  ViewFeed feed;
  feed.publish_pool = [channel = pool_channel_, facet_of, watch = std::make_shared<render::PoolChangeWatch>()](
                          Engine& engine, bool force) {
    const MemoryReport quick = engine.memory_report(false);
    if (!quick.available) return;  // the CPU has no pool (the view says so)
    if (!watch->changed(quick) && !force) return;
    channel->publish(engine.memory_report(true), facet_of(engine));
  };
  feed.publish_attention = [channel = heat_channel_, facet_of](Engine& engine, const AttentionFrame& frame) {
    // The heat lives on the tapped layer's backend: a layer a memory plan left on the CPU has no GPU copy to make.
    DeviceInterop* facet = facet_of(engine);
    channel->publish(frame, facet && frame.backend->interop() == facet ? facet : nullptr);
  };
  feed.forget_device = [pool = pool_channel_, heat = heat_channel_] {
    pool->forget_imports();
    heat->forget_imports();
  };
  return feed;
}

}  // namespace qvl::ui
