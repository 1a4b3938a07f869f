#include "render/vulkan_device.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>

#include "core/error.h"

namespace qvl::render {

namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

std::string version_text(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

std::string uuid_text(const uint8_t* uuid) {
  char text[40];
  for (int i = 0; i < 16; ++i) std::snprintf(text + 2 * i, 3, "%02x", uuid[i]);
  return text;
}

int type_rank(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

DeviceFacts describe(const VulkanApi& api, VkPhysicalDevice device) {
  DeviceFacts c;
  VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
  VkPhysicalDeviceProperties2 properties{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &id};
  api.vkGetPhysicalDeviceProperties2(device, &properties);
  c.name = properties.properties.deviceName;
  c.type = properties.properties.deviceType;
  c.api_version = properties.properties.apiVersion;
  std::memcpy(c.uuid.data(), id.deviceUUID, 16);
  uint32_t count = 0;
  api.vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> extensions(count);
  api.vkEnumerateDeviceExtensionProperties(device, nullptr, &count, extensions.data());
  for (const auto& e : extensions) c.extensions.emplace_back(e.extensionName);
  if (c.api_version >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &v12};
    api.vkGetPhysicalDeviceFeatures2(device, &features);
    c.timeline = v12.timelineSemaphore == VK_TRUE;
  }
  api.vkGetPhysicalDeviceQueueFamilyProperties(device, &count, nullptr);
  std::vector<VkQueueFamilyProperties> families(count);
  api.vkGetPhysicalDeviceQueueFamilyProperties(device, &count, families.data());
  for (uint32_t i = 0; i < count && c.queue_family < 0; ++i)
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) c.queue_family = i;
  return c;
}

}  // namespace

bool DeviceFacts::has(const char* extension) const {
  return std::find(extensions.begin(), extensions.end(), extension) != extensions.end();
}

std::string DeviceFacts::unusable() const {
  if (api_version < VK_API_VERSION_1_2) return "Vulkan " + version_text(api_version) + " (1.2 is needed)";
  if (queue_family < 0) return "no queue that computes";
  if (!has(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME)) return "no " VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
  if (!timeline) return "no timeline semaphores";
  return {};
}

DeviceChoice choose_device(const std::vector<DeviceFacts>& devices, const DeviceRequest& request,
                           const std::string& platform_reason) {
  if (devices.empty()) fail("no Vulkan device (the loader found no driver)");
  std::vector<size_t> usable;
  std::string refused;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (const std::string why = devices[i].unusable(); !why.empty())
      refused += (refused.empty() ? "" : "; ") + devices[i].name + ": " + why;
    else
      usable.push_back(i);
  }
  if (usable.empty()) fail("no Vulkan device can draw the views (", refused, ")");
  auto best = [&](auto&& allowed) {  // discrete first, then integrated, virtual, CPU; those that can show the views first
    std::optional<size_t> chosen;
    auto rank = [&](size_t i) { return std::pair(devices[i].presents == false, type_rank(devices[i].type)); };
    for (size_t i : usable)
      if (allowed(i) && (!chosen || rank(i) < rank(*chosen))) chosen = i;
    return chosen;
  };

  DeviceChoice choice;
  const auto cuda = request.cuda_uuid ? best([&](size_t i) { return devices[i].uuid == *request.cuda_uuid; }) : std::nullopt;
  if (cuda) {
    // The CUDA device itself: what sharing needs, each named.
    const DeviceFacts& d = devices[*cuda];
    choice.index = *cuda;
    if (!d.has(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME))
      choice.interop_reason = "the Vulkan driver has no " VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME;
    else if (!d.has(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME))
      choice.interop_reason = "the Vulkan driver has no " VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME;
    else if (!platform_reason.empty())
      choice.interop_reason = platform_reason;
    else if (d.group_size > 1)
      choice.interop_reason = "the CUDA device is in a Vulkan device group of " + std::to_string(d.group_size) +
                              " GPUs (one GPU is needed)";
    if (d.presents == false) {
      // A hybrid laptop: the display hangs off the iGPU and the CUDA device cannot present to it (or a GPU server
      // whose only display is a software one). The views go where they can be shown, fed from the host.
      if (const auto shown = best([&](size_t i) { return devices[i].presents == true; })) {
        choice.index = *shown;
        choice.interop_reason = devices[*shown].name + " can present to this display, the CUDA device (" + d.name +
                                ") cannot";
      }
    }
    return choice;
  }
  choice.index = *best([](size_t) { return true; });
  if (!request.cuda_uuid) {
    choice.interop_reason = request.no_cuda_reason;
  } else if (const auto refused_cuda = std::find_if(devices.begin(), devices.end(),
                                                    [&](const DeviceFacts& d) { return d.uuid == *request.cuda_uuid; });
             refused_cuda != devices.end()) {
    choice.interop_reason = "the Vulkan driver of the CUDA device (" + refused_cuda->name +
                            ") cannot draw the views: " + refused_cuda->unusable();
  } else {
    std::string names;
    for (size_t i : usable) names += (names.empty() ? "" : ", ") + devices[i].name;
    choice.interop_reason = "no Vulkan device is the CUDA device (UUID " + uuid_text(request.cuda_uuid->data()) +
                            "; Vulkan has " + names + ")";
  }
  return choice;
}

struct VulkanDevice::Messages {
  std::mutex mutex;
  std::vector<std::string> lines;
  static VKAPI_ATTR VkBool32 VKAPI_CALL callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT, const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                 void* self) {
    auto* messages = static_cast<Messages*>(self);
    const char* level = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning";
    std::lock_guard lock(messages->mutex);
    messages->lines.push_back(std::string(level) + ": " + (data && data->pMessage ? data->pMessage : "?"));
    return VK_FALSE;
  }
};

std::vector<std::string> surface_extensions() {
  const VulkanApi* api = vulkan_api(nullptr);
  if (!api) return {};
  uint32_t count = 0;
  api->vkEnumerateInstanceExtensionProperties(nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> available(count);
  api->vkEnumerateInstanceExtensionProperties(nullptr, &count, available.data());
  std::vector<std::string> wanted;
  for (const char* name : {"VK_KHR_surface", "VK_KHR_xcb_surface", "VK_KHR_xlib_surface", "VK_KHR_wayland_surface"})
    for (const auto& e : available)
      if (std::strcmp(e.extensionName, name) == 0) wanted.emplace_back(name);
  if (wanted.empty() || wanted.front() != "VK_KHR_surface") return {};
  return wanted;
}

std::string platform_interop_reason(std::optional<std::string> kernel_release) {
  if (!kernel_release) {
    std::ifstream release("/proc/sys/kernel/osrelease");
    std::getline(release, kernel_release.emplace());
  }
  std::string text = *kernel_release;
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (text.find("microsoft") != std::string::npos)
    return "WSL2: CUDA cannot import Vulkan's file descriptors there";
  return {};
}

VulkanDevice::VulkanDevice(const DeviceRequest& request) {
  std::string reason;
  const VulkanApi* loaded = vulkan_api(&reason);
  if (!loaded) fail(reason);
  api = *loaded;
  create_instance(request);
  try {
    choose_physical_device(request);
    create_device(request);
  } catch (...) {
    if (messenger_) api.vkDestroyDebugUtilsMessengerEXT(instance, messenger_, nullptr);
    api.vkDestroyInstance(instance, nullptr);
    throw;
  }
}

VulkanDevice::~VulkanDevice() {
  if (device) {
    api.vkDeviceWaitIdle(device);
    api.vkDestroyDevice(device, nullptr);
  }
  if (messenger_) api.vkDestroyDebugUtilsMessengerEXT(instance, messenger_, nullptr);
  if (instance) api.vkDestroyInstance(instance, nullptr);
}

void VulkanDevice::create_instance(const DeviceRequest& request) {
  uint32_t version = 0;
  api.vkEnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_2)
    fail("the Vulkan loader is version ", version_text(version), " (1.2 or newer is needed)");
  std::vector<const char*> layers, extensions;
  for (const auto& e : request.instance_extensions) extensions.push_back(e.c_str());
  if (request.validation) {
    uint32_t count = 0;
    api.vkEnumerateInstanceLayerProperties(&count, nullptr);
    std::vector<VkLayerProperties> available(count);
    api.vkEnumerateInstanceLayerProperties(&count, available.data());
    if (std::none_of(available.begin(), available.end(),
                     [](const VkLayerProperties& l) { return std::strcmp(l.layerName, kValidationLayer) == 0; }))
      fail("the Vulkan validation layers are not installed (Debian's package is vulkan-validationlayers)");
    layers.push_back(kValidationLayer);
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "qvl";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  vk_check(api.vkCreateInstance(&info, nullptr, &instance), "creating the instance (vkCreateInstance)");
  api.load_instance(instance);
  if (request.validation) {
    messages_ = std::make_unique<Messages>();
    VkDebugUtilsMessengerCreateInfoEXT messenger{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    messenger.messageSeverity =
        VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                            VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    messenger.pfnUserCallback = &Messages::callback;
    messenger.pUserData = messages_.get();
    vk_check(api.vkCreateDebugUtilsMessengerEXT(instance, &messenger, nullptr, &messenger_),
             "creating the validation messenger");
  }
}

void VulkanDevice::choose_physical_device(const DeviceRequest& request) {
  uint32_t count = 0;
  api.vkEnumeratePhysicalDevices(instance, &count, nullptr);
  std::vector<VkPhysicalDevice> devices(count);
  api.vkEnumeratePhysicalDevices(instance, &count, devices.data());
  std::vector<DeviceFacts> facts;
  for (VkPhysicalDevice d : devices) facts.push_back(describe(api, d));
  api.vkEnumeratePhysicalDeviceGroups(instance, &count, nullptr);
  std::vector<VkPhysicalDeviceGroupProperties> groups(count, {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_GROUP_PROPERTIES});
  api.vkEnumeratePhysicalDeviceGroups(instance, &count, groups.data());
  for (const auto& g : groups)
    for (uint32_t i = 0; i < g.physicalDeviceCount; ++i)
      for (size_t d = 0; d < devices.size(); ++d)
        if (devices[d] == g.physicalDevices[i]) facts[d].group_size = g.physicalDeviceCount;
  if (request.presentation)
    for (size_t d = 0; d < devices.size(); ++d)
      if (facts[d].queue_family >= 0)
        facts[d].presents = request.presentation(api, instance, devices[d], uint32_t(facts[d].queue_family));

  const DeviceChoice choice = choose_device(facts, request, platform_interop_reason());
  const DeviceFacts& chosen = facts[choice.index];
  interop_reason_ = choice.interop_reason;
  physical = devices[choice.index];
  name = chosen.name;
  software = chosen.type == VK_PHYSICAL_DEVICE_TYPE_CPU;
  queue_family = static_cast<uint32_t>(chosen.queue_family);
  api.vkGetPhysicalDeviceMemoryProperties(physical, &memory_);
}

void VulkanDevice::create_device(const DeviceRequest& request) {
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue_info.queueFamilyIndex = queue_family;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  std::vector<const char*> extensions{VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  if (request.presents) {
    uint32_t count = 0;
    api.vkEnumerateDeviceExtensionProperties(physical, nullptr, &count, nullptr);
    std::vector<VkExtensionProperties> available(count);
    api.vkEnumerateDeviceExtensionProperties(physical, nullptr, &count, available.data());
    swapchain = std::any_of(available.begin(), available.end(), [](const VkExtensionProperties& e) {
      return std::strcmp(e.extensionName, VK_KHR_SWAPCHAIN_EXTENSION_NAME) == 0;
    });
    if (swapchain) extensions.push_back(VK_KHR_SWAPCHAIN_EXTENSION_NAME);
  }
  if (shares_memory_with_cuda()) {
    extensions.push_back(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
    extensions.push_back(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
  }
  VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  v12.timelineSemaphore = VK_TRUE;
  VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &v12};
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue_info;
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  vk_check(api.vkCreateDevice(physical, &info, nullptr, &device), "creating the device (vkCreateDevice)");
  api.load_device(device);
  api.vkGetDeviceQueue(device, queue_family, 0, &queue);
}

uint32_t VulkanDevice::memory_type(uint32_t allowed, VkMemoryPropertyFlags flags) const {
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i)
    if ((allowed & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & flags) == flags) return i;
  fail("Vulkan: ", name, " has no memory type with properties ", flags);
}

std::vector<std::string> VulkanDevice::validation_messages() const {
  if (!messages_) return {};
  std::lock_guard lock(messages_->mutex);
  return messages_->lines;
}

}  // namespace qvl::render
