#include "render/vulkan_api.h"

#include <dlfcn.h>

#include <cstdlib>

#include "core/error.h"

namespace qvl::render {

namespace {

struct LoadedApi {
  VulkanApi api;
  std::string reason;  // empty when loaded
};

LoadedApi load_loader() {
  LoadedApi loaded;
  const char* path = std::getenv("QVL_VULKAN_LOADER");
  if (path && !*path) {
    loaded.reason = "no Vulkan loader ($QVL_VULKAN_LOADER is empty)";
    return loaded;
  }
  const std::string file = path ? path : "libvulkan.so.1";
  // Never closed: the driver may keep threads and callbacks until the process ends.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    loaded.reason = "no Vulkan loader (" + file + " cannot be opened; Debian's package is libvulkan1)";
    return loaded;
  }
  auto& api = loaded.api;
  api.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(handle, "vkGetInstanceProcAddr"));
  if (!api.vkGetInstanceProcAddr) {
    loaded.reason = file + " has no vkGetInstanceProcAddr";
    return loaded;
  }
#define QVL_VK_LOAD_GLOBAL(name) api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(nullptr, #name));
  QVL_VK_GLOBAL_FUNCTIONS(QVL_VK_LOAD_GLOBAL)
#undef QVL_VK_LOAD_GLOBAL
  if (!api.vkCreateInstance || !api.vkEnumerateInstanceVersion)
    loaded.reason = file + " is a Vulkan 1.0 loader (1.1 or newer is needed)";
  return loaded;
}

}  // namespace

void VulkanApi::load_instance(VkInstance instance) {
#define QVL_VK_LOAD_INSTANCE(name) name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance, #name));
  QVL_VK_INSTANCE_FUNCTIONS(QVL_VK_LOAD_INSTANCE)
#undef QVL_VK_LOAD_INSTANCE
}

void VulkanApi::load_device(VkDevice device) {
#define QVL_VK_LOAD_DEVICE(name) name = reinterpret_cast<PFN_##name>(vkGetDeviceProcAddr(device, #name));
  QVL_VK_DEVICE_FUNCTIONS(QVL_VK_LOAD_DEVICE)
#undef QVL_VK_LOAD_DEVICE
}

const VulkanApi* vulkan_api(std::string* reason) {
  static const LoadedApi loaded = load_loader();
  if (!loaded.reason.empty()) {
    if (reason) *reason = loaded.reason;
    return nullptr;
  }
  return &loaded.api;
}

const char* vk_result_name(VkResult result) {
  switch (result) {
#define QVL_VK_RESULT(r) \
  case r: return #r;
    QVL_VK_RESULT(VK_SUCCESS)
    QVL_VK_RESULT(VK_NOT_READY)
    QVL_VK_RESULT(VK_TIMEOUT)
    QVL_VK_RESULT(VK_INCOMPLETE)
    QVL_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
    QVL_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    QVL_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
    QVL_VK_RESULT(VK_ERROR_DEVICE_LOST)
    QVL_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
    QVL_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
    QVL_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
    QVL_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
    QVL_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
    QVL_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
    QVL_VK_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
#undef QVL_VK_RESULT
    default: return "VK_ERROR (other)";
  }
}

void vk_check(VkResult result, const char* what) {
  if (result != VK_SUCCESS) fail("Vulkan: ", what, " failed: ", vk_result_name(result));
}

}  // namespace qvl::render
