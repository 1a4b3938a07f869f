// The choice of the Vulkan device the views draw on, for machines the test machines are not: a hybrid laptop whose
// display hangs off the iGPU, a driver too old for the extensions or for Vulkan 1.2, WSL2, a device group. Each
// fallback must pick a device that can still draw (fed from the host) and name its reason.
#include <gtest/gtest.h>

#include "core/error.h"
#include "render/vulkan_device.h"

namespace qvl::render {
namespace {

const std::array<uint8_t, 16> kCudaUuid{0x47, 0x50, 0x55, 0x2d, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

DeviceFacts device(std::string name, VkPhysicalDeviceType type, uint8_t uuid_tag) {
  DeviceFacts d;
  d.name = std::move(name);
  d.type = type;
  d.api_version = VK_API_VERSION_1_3;
  d.uuid.fill(uuid_tag);
  d.extensions = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME,
                  VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME, VK_KHR_SWAPCHAIN_EXTENSION_NAME};
  d.timeline = true;
  d.queue_family = 0;
  return d;
}

DeviceFacts nvidia(std::string name = "NVIDIA GeForce MX350") {
  DeviceFacts d = device(std::move(name), VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 0);
  d.uuid = kCudaUuid;
  return d;
}
DeviceFacts intel() { return device("Intel(R) UHD Graphics (CML GT2)", VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, 1); }
DeviceFacts lavapipe() { return device("llvmpipe (LLVM 15.0.6, 256 bits)", VK_PHYSICAL_DEVICE_TYPE_CPU, 2); }

DeviceRequest with_cuda() {
  DeviceRequest request;
  request.cuda_uuid = kCudaUuid;
  return request;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DeviceChoice, TheCudaDeviceSharesItsMemoryWhereEverythingAllows) {
  for (std::optional<bool> presents : {std::optional<bool>{}, std::optional<bool>{true}}) {
    std::vector<DeviceFacts> devices{lavapipe(), intel(), nvidia()};
    for (auto& d : devices) d.presents = presents;
    const DeviceChoice choice = choose_device(devices, with_cuda(), "");
    EXPECT_EQ(devices[choice.index].name, "NVIDIA GeForce MX350");
    EXPECT_EQ(choice.interop_reason, "");
  }
}

TEST(DeviceChoice, AHybridLaptopDrawsOnTheIgpuThatDrivesTheDisplayFromTheHost) {
  std::vector<DeviceFacts> devices{nvidia(), intel()};
  devices[0].presents = false;  // PRIME without render offload: the NVIDIA GPU has no connection to the display
  devices[1].presents = true;
  const DeviceChoice choice = choose_device(devices, with_cuda(), "");
  EXPECT_EQ(choice.index, 1u);
  EXPECT_EQ(choice.interop_reason,
            "Intel(R) UHD Graphics (CML GT2) can present to this display, the CUDA device (NVIDIA GeForce MX350) cannot");
  // With WSL2's or a device group's reason too, the display decides where the views go.
  EXPECT_EQ(choose_device(devices, with_cuda(), platform_interop_reason("5.15.153.1-microsoft-standard-WSL2")).index, 1u);
}

TEST(DeviceChoice, TheCudaDeviceStaysWhereNoOtherDeviceIsKnownToShowTheViews) {
  std::vector<DeviceFacts> devices{nvidia(), intel()};
  devices[0].presents = false;  // and nobody else can: the swapchain will say why, and the views fall back to QPainter
  DeviceChoice choice = choose_device(devices, with_cuda(), "");
  EXPECT_EQ(choice.index, 0u);
  EXPECT_EQ(choice.interop_reason, "");
  devices[0].presents = std::nullopt;  // not asked (no X11): the CUDA device is not passed over on a guess
  devices[1].presents = true;
  choice = choose_device(devices, with_cuda(), "");
  EXPECT_EQ(choice.index, 0u);
  EXPECT_EQ(choice.interop_reason, "");
}

TEST(DeviceChoice, AHybridLaptopWithoutNvidiasVulkanDriverNamesWhatVulkanHas) {
  std::vector<DeviceFacts> devices{intel(), lavapipe()};
  const DeviceChoice choice = choose_device(devices, with_cuda(), "");
  EXPECT_EQ(choice.index, 0u);  // the iGPU before the CPU
  EXPECT_TRUE(contains(choice.interop_reason, "no Vulkan device is the CUDA device (UUID 4750552d0102"));
  EXPECT_TRUE(contains(choice.interop_reason, "Vulkan has Intel(R) UHD Graphics (CML GT2), llvmpipe"));
}

TEST(DeviceChoice, ADriverWithoutTheExternalExtensionsNamesTheMissingOne) {
  DeviceFacts old = nvidia("NVIDIA GeForce GTX 1050");
  std::erase(old.extensions, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
  DeviceChoice choice = choose_device({old}, with_cuda(), "");
  EXPECT_EQ(choice.index, 0u);  // still the GPU that draws, fed from the host
  EXPECT_EQ(choice.interop_reason, "the Vulkan driver has no VK_KHR_external_memory_fd");
  old = nvidia("NVIDIA GeForce GTX 1050");
  std::erase(old.extensions, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
  choice = choose_device({old}, with_cuda(), "");
  EXPECT_EQ(choice.interop_reason, "the Vulkan driver has no VK_KHR_external_semaphore_fd");
}

TEST(DeviceChoice, ADriverOlderThanVulkan12IsPassedOverWithItsVersion) {
  DeviceFacts old = nvidia("NVIDIA GeForce GTX 1060");
  old.api_version = VK_API_VERSION_1_1;
  const DeviceChoice choice = choose_device({old, lavapipe()}, with_cuda(), "");
  EXPECT_EQ(choice.index, 1u);
  EXPECT_EQ(choice.interop_reason,
            "the Vulkan driver of the CUDA device (NVIDIA GeForce GTX 1060) cannot draw the views: Vulkan 1.1.0 (1.2 is "
            "needed)");
  // Alone it cannot draw at all: the views are drawn by QPainter, and the error says why.
  try {
    choose_device({old}, with_cuda(), "");
    FAIL() << "a Vulkan 1.1 device was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "NVIDIA GeForce GTX 1060: Vulkan 1.1.0 (1.2 is needed)")) << e.what();
  }
  DeviceFacts no_timeline = nvidia();
  no_timeline.timeline = false;
  EXPECT_THROW(choose_device({no_timeline}, with_cuda(), ""), Error);
}

TEST(DeviceChoice, Wsl2IsRecognisedFromTheKernelAndFallsBackToTheHost) {
  EXPECT_EQ(platform_interop_reason("5.15.153.1-microsoft-standard-WSL2"),
            "WSL2: CUDA cannot import Vulkan's file descriptors there");
  EXPECT_EQ(platform_interop_reason("6.1.0-28-amd64"), "");
  const DeviceChoice choice = choose_device({nvidia()}, with_cuda(), platform_interop_reason("4.4.0-19041-Microsoft"));
  EXPECT_EQ(choice.interop_reason, "WSL2: CUDA cannot import Vulkan's file descriptors there");
}

TEST(DeviceChoice, ADeviceGroupOfTwoGpusIsRefusedForSharing) {
  DeviceFacts grouped = nvidia();
  grouped.group_size = 2;
  EXPECT_EQ(choose_device({grouped}, with_cuda(), "").interop_reason,
            "the CUDA device is in a Vulkan device group of 2 GPUs (one GPU is needed)");
}

TEST(DeviceChoice, WithoutCudaTheBestDeviceThatShowsTheViewsIsTaken) {
  DeviceRequest request;
  request.no_cuda_reason = "no CUDA device (no libcuda.so.1)";
  std::vector<DeviceFacts> devices{lavapipe(), intel(), nvidia()};
  DeviceChoice choice = choose_device(devices, request, "");
  EXPECT_EQ(devices[choice.index].name, "NVIDIA GeForce MX350");  // discrete first
  EXPECT_EQ(choice.interop_reason, "no CUDA device (no libcuda.so.1)");
  devices[2].presents = false;
  devices[1].presents = true;
  choice = choose_device(devices, request, "");
  EXPECT_EQ(devices[choice.index].name, "Intel(R) UHD Graphics (CML GT2)");  // one that can show them first
  EXPECT_THROW(choose_device({}, request, ""), Error);
}

}  // namespace
}  // namespace qvl::render
