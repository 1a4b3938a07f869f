#include "render/picture_renderer.h"

#include <cstring>
#include <vector>

#include "core/error.h"

namespace qvl::render {

namespace {

// SPIR-V compiled from shaders/*.comp at build time (glslc -mfmt=c).
constexpr uint32_t kPoolMapSpirv[] =
#include "pool_map.comp.inc"
    ;
constexpr uint32_t kHeatmapSpirv[] =
#include "heatmap.comp.inc"
    ;

struct PoolMapPush {
  uint32_t width, height, bar_height;
  int32_t capacity_column;
  uint32_t bgra;
};
struct HeatmapPush {
  uint32_t width, height, grid_width, grid_height, opacity, bgra;
};

constexpr uint32_t kGroup = 16;  // the shaders' local size in x and y

}  // namespace

PictureRenderer::PictureRenderer(VulkanDevice& device) : device_(device) {
  pool_map_ = make_pipeline(kPoolMapSpirv, sizeof kPoolMapSpirv, 3, sizeof(PoolMapPush));
  heatmap_ = make_pipeline(kHeatmapSpirv, sizeof kHeatmapSpirv, 4, sizeof(HeatmapPush));
  const auto pool = pool_palette(), heat = heat_palette();
  palettes_ = std::make_unique<VulkanBuffer>(device, kRegionAlignment + heat.size_bytes(), VulkanBuffer::Kind::HostVisible);
  auto* bytes = static_cast<uint8_t*>(palettes_->mapped());
  std::memcpy(bytes, pool.data(), pool.size_bytes());
  std::memcpy(bytes + kRegionAlignment, heat.data(), heat.size_bytes());
}

PictureRenderer::~PictureRenderer() {
  destroy(pool_map_);
  destroy(heatmap_);
}

PictureRenderer::Pipeline PictureRenderer::make_pipeline(const uint32_t* spirv, size_t bytes, uint32_t buffers,
                                                         uint32_t push_bytes) {
  const auto& vk = device_.api;
  Pipeline p;
  std::vector<VkDescriptorSetLayoutBinding> bindings(buffers);
  for (uint32_t i = 0; i < buffers; ++i)
    bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set_info.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  set_info.bindingCount = buffers;
  set_info.pBindings = bindings.data();
  vk_check(vk.vkCreateDescriptorSetLayout(device_.device, &set_info, nullptr, &p.set_layout), "creating a set layout");
  const VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &p.set_layout;
  layout_info.pushConstantRangeCount = 1;
  layout_info.pPushConstantRanges = &push;
  vk_check(vk.vkCreatePipelineLayout(device_.device, &layout_info, nullptr, &p.layout), "creating a pipeline layout");
  VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module_info.codeSize = bytes;
  module_info.pCode = spirv;
  VkShaderModule module = VK_NULL_HANDLE;
  vk_check(vk.vkCreateShaderModule(device_.device, &module_info, nullptr, &module), "creating a shader module");
  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.layout = p.layout;
  const VkResult made = vk.vkCreateComputePipelines(device_.device, VK_NULL_HANDLE, 1, &info, nullptr, &p.pipeline);
  vk.vkDestroyShaderModule(device_.device, module, nullptr);
  vk_check(made, "creating a compute pipeline");
  return p;
}

void PictureRenderer::destroy(Pipeline& p) {
  const auto& vk = device_.api;
  vk.vkDestroyPipeline(device_.device, p.pipeline, nullptr);
  vk.vkDestroyPipelineLayout(device_.device, p.layout, nullptr);
  vk.vkDestroyDescriptorSetLayout(device_.device, p.set_layout, nullptr);
}

void PictureRenderer::bind(VkCommandBuffer cmd, const Pipeline& p, std::initializer_list<BufferRange> buffers) {
  std::vector<VkDescriptorBufferInfo> infos;
  std::vector<VkWriteDescriptorSet> writes;
  infos.reserve(buffers.size());
  for (const BufferRange& b : buffers) {
    if (b.offset % kRegionAlignment) fail("Vulkan: a buffer region at ", b.offset, " is not aligned to ", kRegionAlignment);
    infos.push_back({b.buffer, b.offset, b.bytes});
  }
  for (uint32_t i = 0; i < infos.size(); ++i) {
    VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstBinding = i;
    w.descriptorCount = 1;
    w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w.pBufferInfo = &infos[i];
    writes.push_back(w);
  }
  device_.api.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  device_.api.vkCmdPushDescriptorSetKHR(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0,
                                        static_cast<uint32_t>(writes.size()), writes.data());
}

namespace {
void pixels_ready(const VulkanApi& vk, VkCommandBuffer cmd) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_HOST_READ_BIT;
  vk.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                          VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                          0, 1, &barrier, 0, nullptr, 0, nullptr);
}
}  // namespace

void PictureRenderer::record_pool_map(VkCommandBuffer cmd, const BufferRange& codes, const BufferRange& pixels,
                                      const PoolMapGeometry& g, int capacity_column, ChannelOrder order) {
  check_pool_map_geometry(g);
  const uint64_t count = uint64_t(g.width) * g.height;
  if (codes.bytes < count || pixels.bytes < count * 4)
    fail("Vulkan: a ", g.width, "x", g.height, " pool map does not fit its buffers");
  const auto pool = pool_palette();
  bind(cmd, pool_map_, {codes, {palettes_->buffer(), 0, pool.size_bytes()}, pixels});
  const PoolMapPush push{uint32_t(g.width), uint32_t(g.height), uint32_t(g.bar_height), capacity_column,
                         static_cast<uint32_t>(order)};
  device_.api.vkCmdPushConstants(cmd, pool_map_.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push, &push);
  device_.api.vkCmdDispatch(cmd, (g.width + kGroup - 1) / kGroup, (g.height + kGroup - 1) / kGroup, 1);
  pixels_ready(device_.api, cmd);
}

void PictureRenderer::record_heatmap(VkCommandBuffer cmd, const BufferRange& picture, const BufferRange& heat,
                                     const BufferRange& pixels, const HeatmapShape& s, ChannelOrder order) {
  const uint64_t count = uint64_t(s.width) * s.height;
  if (s.width == 0 || s.height == 0 || s.grid_width == 0 || s.grid_height == 0 || s.opacity > 255 ||
      picture.bytes < count * 4 || pixels.bytes < count * 4 || heat.bytes < uint64_t(s.grid_width) * s.grid_height * 4)
    fail("Vulkan: a ", s.width, "x", s.height, " heatmap over a ", s.grid_width, "x", s.grid_height,
         " grid does not fit its buffers");
  const auto palette = heat_palette();
  bind(cmd, heatmap_, {picture, heat, {palettes_->buffer(), kRegionAlignment, palette.size_bytes()}, pixels});
  const HeatmapPush push{s.width, s.height, s.grid_width, s.grid_height, s.opacity, static_cast<uint32_t>(order)};
  device_.api.vkCmdPushConstants(cmd, heatmap_.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push, &push);
  device_.api.vkCmdDispatch(cmd, (s.width + kGroup - 1) / kGroup, (s.height + kGroup - 1) / kGroup, 1);
  pixels_ready(device_.api, cmd);
}

CommandSlots::CommandSlots(VulkanDevice& device, uint32_t slots) : device_(device) {
  const auto& vk = device.api;
  VkCommandPoolCreateInfo info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  info.queueFamilyIndex = device.queue_family;
  vk_check(vk.vkCreateCommandPool(device.device, &info, nullptr, &pool_), "creating a command pool");
  buffers_.resize(slots);
  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = pool_;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = slots;
  vk_check(vk.vkAllocateCommandBuffers(device.device, &alloc, buffers_.data()), "allocating command buffers");
  VkFenceCreateInfo fence{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  fence.flags = VK_FENCE_CREATE_SIGNALED_BIT;
  fences_.resize(slots, VK_NULL_HANDLE);
  for (auto& f : fences_) vk_check(vk.vkCreateFence(device.device, &fence, nullptr, &f), "creating a fence");
}

void CommandSlots::wait_all() {
  for (uint32_t slot = 0; slot < fences_.size(); ++slot) wait_for(slot);
}

void CommandSlots::wait_for(uint32_t slot) {
  vk_check(device_.api.vkWaitForFences(device_.device, 1, &fences_.at(slot), VK_TRUE, UINT64_MAX),
           "waiting for a command buffer");
}

CommandSlots::~CommandSlots() {
  device_.api.vkQueueWaitIdle(device_.queue);
  for (VkFence f : fences_) device_.api.vkDestroyFence(device_.device, f, nullptr);
  device_.api.vkDestroyCommandPool(device_.device, pool_, nullptr);
}

VkCommandBuffer CommandSlots::begin(uint32_t slot) {
  VkCommandBuffer cmd = buffers_.at(slot);
  wait_for(slot);
  vk_check(device_.api.vkResetCommandBuffer(cmd, 0), "resetting a command buffer");
  VkCommandBufferBeginInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  vk_check(device_.api.vkBeginCommandBuffer(cmd, &info), "beginning a command buffer");
  return cmd;
}

void CommandSlots::end(uint32_t slot) { vk_check(device_.api.vkEndCommandBuffer(buffers_.at(slot)), "ending a command buffer"); }

void CommandSlots::submit(uint32_t slot, const std::vector<TimelinePoint>& waits,
                          const std::vector<TimelinePoint>& signal_points) {
  wait_for(slot);
  vk_check(device_.api.vkResetFences(device_.device, 1, &fences_.at(slot)), "resetting a fence");
  std::vector<VkSemaphore> wait_semaphores, signal_semaphores;
  std::vector<uint64_t> wait_values, signal_values;
  std::vector<VkPipelineStageFlags> stages;
  for (const auto& w : waits) {
    wait_semaphores.push_back(w.semaphore);
    wait_values.push_back(w.value);
    stages.push_back(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT);
  }
  for (const auto& s : signal_points) {
    signal_semaphores.push_back(s.semaphore);
    signal_values.push_back(s.value);
  }
  VkTimelineSemaphoreSubmitInfo timeline{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  timeline.waitSemaphoreValueCount = static_cast<uint32_t>(wait_values.size());
  timeline.pWaitSemaphoreValues = wait_values.data();
  timeline.signalSemaphoreValueCount = static_cast<uint32_t>(signal_values.size());
  timeline.pSignalSemaphoreValues = signal_values.data();
  VkSubmitInfo info{VK_STRUCTURE_TYPE_SUBMIT_INFO, &timeline};
  info.waitSemaphoreCount = static_cast<uint32_t>(wait_semaphores.size());
  info.pWaitSemaphores = wait_semaphores.data();
  info.pWaitDstStageMask = stages.data();
  info.commandBufferCount = 1;
  info.pCommandBuffers = &buffers_.at(slot);
  info.signalSemaphoreCount = static_cast<uint32_t>(signal_semaphores.size());
  info.pSignalSemaphores = signal_semaphores.data();
  vk_check(device_.api.vkQueueSubmit(device_.queue, 1, &info, fences_.at(slot)), "submitting (vkQueueSubmit)");
}

}  // namespace qvl::render
