#include "ui/vulkan_views.h"

#include <QGuiApplication>
#include <QVulkanInstance>
#if defined(QVL_HAVE_XCB) && QT_CONFIG(xcb)
#include <xcb/xcb.h>

#include "render/vulkan_api.h"  // vulkan_core.h's types, which vulkan_xcb.h needs
#include <vulkan/vulkan_xcb.h>
#endif

#include "backend/cuda_plugin.h"
#include "render/heat_channel.h"
#include "render/pool_map_channel.h"
#include "render/views_feed.h"
#include "render/vulkan_device.h"

namespace qvl::ui {

namespace {

// Whether a device can present to the X server Qt is connected to, asked without a window (a hybrid laptop's
// display hangs off the iGPU). Elsewhere (Wayland) nullopt: the swapchain finds out, and the view says so.
render::PresentationProbe display_presentation() {
#if defined(QVL_HAVE_XCB) && QT_CONFIG(xcb)
  const auto* x11 = qGuiApp->nativeInterface<QNativeInterface::QX11Application>();
  if (!x11 || !x11->connection()) return {};
  xcb_connection_t* connection = x11->connection();
  const xcb_visualid_t visual = xcb_setup_roots_iterator(xcb_get_setup(connection)).data->root_visual;
  return [connection, visual](const render::VulkanApi& api, VkInstance instance, VkPhysicalDevice device,
                              uint32_t family) -> std::optional<bool> {
    const auto query = reinterpret_cast<PFN_vkGetPhysicalDeviceXcbPresentationSupportKHR>(
        api.vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceXcbPresentationSupportKHR"));
    if (!query) return std::nullopt;  // the instance has no VK_KHR_xcb_surface
    return query(device, family, connection, visual) == VK_TRUE;
  };
#else
  return {};
#endif
}

}  // namespace

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
    request.presentation = display_presentation();
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
  const auto feed = std::make_shared<render::ViewsFeed>(
      pool_channel_, heat_channel_, device_->shares_memory_with_cuda() ? cuda_device_uuid(0) : std::nullopt);
  return {[feed](Engine& engine, bool force) { feed->publish_pool(engine, force); },
          [feed](Engine& engine, const AttentionFrame& frame) { feed->publish_attention(engine, frame); },
          [feed] { feed->forget_imports(); }};
}

}  // namespace qvl::ui
