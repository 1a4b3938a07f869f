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

struct Candidate {
  VkPhysicalDevice device = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties properties{};
  std::array<uint8_t, 16> uuid{};
  std::vector<std::string> extensions;
  bool timeline = false;
  int64_t queue_family = -1;
  bool has(const char* extension) const {
    return std::find(extensions.begin(), extensions.end(), extension) != extensions.end();
  }
  // Empty when the views can be drawn on it at all.
  std::string unusable() const {
    if (properties.apiVersion < VK_API_VERSION_1_2)
      return "Vulkan " + version_text(properties.apiVersion) + " (1.2 is needed)";
    if (queue_family < 0) return "no queue that computes";
    if (!has(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME)) return "no " VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
    if (!timeline) return "no timeline semaphores";
    return {};
  }
};

int type_rank(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

Candidate describe(const VulkanApi& api, VkPhysicalDevice device) {
  Candidate c;
  c.device = device;
  VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
  VkPhysicalDeviceProperties2 properties{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &id};
  api.vkGetPhysicalDeviceProperties2(device, &properties);
  c.properties = properties.properties;
  std::memcpy(c.uuid.data(), id.deviceUUID, 16);
  uint32_t count = 0;
  api.vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> extensions(count);
  api.vkEnumerateDeviceExtensionProperties(device, nullptr, &count, extensions.data());
  for (const auto& e : extensions) c.extensions.emplace_back(e.extensionName);
  if (c.properties.apiVersion >= VK_API_VERSION_1_2) {
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

std::string platform_interop_reason() {
  std::ifstream release("/proc/sys/kernel/osrelease");
  std::string text;
  std::getline(release, text);
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
  if (devices.empty()) fail("no Vulkan device (the loader found no driver)");
  std::vector<Candidate> usable;
  std::string refused;
  for (VkPhysicalDevice d : devices) {
    Candidate c = describe(api, d);
    if (const std::string why = c.unusable(); !why.empty())
      refused += std::string(refused.empty() ? "" : "; ") + c.properties.deviceName + ": " + why;
    else
      usable.push_back(std::move(c));
  }
  if (usable.empty()) fail("no Vulkan device can draw the views (", refused, ")");

  const Candidate* chosen = nullptr;
  if (request.cuda_uuid)
    for (const auto& c : usable)
      if (c.uuid == *request.cuda_uuid) chosen = &c;
  if (chosen) {
    // The CUDA device itself: what sharing needs, each named.
    if (!chosen->has(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME))
      interop_reason_ = "the Vulkan driver has no " VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME;
    else if (!chosen->has(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME))
      interop_reason_ = "the Vulkan driver has no " VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME;
    else
      interop_reason_ = platform_interop_reason();
    if (interop_reason_.empty()) {
      api.vkEnumeratePhysicalDeviceGroups(instance, &count, nullptr);
      std::vector<VkPhysicalDeviceGroupProperties> groups(count, {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_GROUP_PROPERTIES});
      api.vkEnumeratePhysicalDeviceGroups(instance, &count, groups.data());
      for (const auto& g : groups)
        for (uint32_t i = 0; i < g.physicalDeviceCount; ++i)
          if (g.physicalDevices[i] == chosen->device && g.physicalDeviceCount > 1)
            interop_reason_ = "the CUDA device is in a Vulkan device group of " +
                              std::to_string(g.physicalDeviceCount) + " GPUs (one GPU is needed)";
    }
  } else {
    chosen = &*std::min_element(usable.begin(), usable.end(), [](const Candidate& a, const Candidate& b) {
      return type_rank(a.properties.deviceType) < type_rank(b.properties.deviceType);
    });
    if (!request.cuda_uuid) {
      interop_reason_ = request.no_cuda_reason;
    } else {
      std::string names;
      for (const auto& c : usable) names += std::string(names.empty() ? "" : ", ") + c.properties.deviceName;
      interop_reason_ = "no Vulkan device is the CUDA device (UUID " + uuid_text(request.cuda_uuid->data()) +
                        "; Vulkan has " + names + ")";
    }
  }
  physical = chosen->device;
  name = chosen->properties.deviceName;
  software = chosen->properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  queue_family = static_cast<uint32_t>(chosen->queue_family);
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
