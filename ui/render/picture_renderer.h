#pragma once
// The views' compute pipelines: pool map codes -> pixels and heat grid + picture -> pixels (shaders/*.comp), bound
// with push descriptors so one command buffer can draw from any buffer region (a CUDA-written slot, a staging
// upload) without descriptor pools. Recording only: the caller owns command buffers, semaphores and buffers.
#include <memory>
#include <vector>

#include "render/pictures.h"
#include "render/vulkan_memory.h"

namespace qvl::render {

struct BufferRange {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t offset = 0;  // a multiple of kRegionAlignment
  uint64_t bytes = 0;
};

class PictureRenderer {
public:
  explicit PictureRenderer(VulkanDevice& device);
  ~PictureRenderer();
  PictureRenderer(const PictureRenderer&) = delete;
  PictureRenderer& operator=(const PictureRenderer&) = delete;

  // Each ends with a barrier that makes the pixels visible to later transfers and shader reads.
  void record_pool_map(VkCommandBuffer cmd, const BufferRange& codes, const BufferRange& pixels,
                       const PoolMapGeometry& geometry, int capacity_column, ChannelOrder order);
  void record_heatmap(VkCommandBuffer cmd, const BufferRange& picture, const BufferRange& heat,
                      const BufferRange& pixels, const HeatmapShape& shape, ChannelOrder order);

private:
  struct Pipeline {
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkPipeline pipeline = VK_NULL_HANDLE;
  };
  Pipeline make_pipeline(const uint32_t* spirv, size_t bytes, uint32_t buffers, uint32_t push_bytes);
  void destroy(Pipeline& p);
  void bind(VkCommandBuffer cmd, const Pipeline& p, std::initializer_list<BufferRange> buffers);

  VulkanDevice& device_;
  Pipeline pool_map_, heatmap_;
  std::unique_ptr<VulkanBuffer> palettes_;  // pool palette at 0, heat palette at kRegionAlignment
};

// A command pool with one reusable command buffer per slot, each with a fence (so the host, and the validation
// layers, know a slot's last submission finished before it is recorded or submitted again, even when its waits are
// on semaphores another API signals), and submission with timeline semaphores.
class CommandSlots {
public:
  CommandSlots(VulkanDevice& device, uint32_t slots);
  ~CommandSlots();
  CommandSlots(const CommandSlots&) = delete;
  CommandSlots& operator=(const CommandSlots&) = delete;

  VkCommandBuffer begin(uint32_t slot);  // waits for the slot's last submission, then resets it
  void wait_all();                       // every slot's last submission (before what they use is destroyed)
  void end(uint32_t slot);
  struct TimelinePoint {
    VkSemaphore semaphore;
    uint64_t value;
  };
  // Runs the slot's commands once every `waits` point is reached (before the compute work); sets `signal_points` after.
  // A slot submitted again first waits for its previous submission (a recorded slot may be submitted many times).
  void submit(uint32_t slot, const std::vector<TimelinePoint>& waits, const std::vector<TimelinePoint>& signal_points);

private:
  VulkanDevice& device_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<VkCommandBuffer> buffers_;
  std::vector<VkFence> fences_;  // signalled when the slot's last submission finished (made signalled)
  void wait_for(uint32_t slot);
};

}  // namespace qvl::render
