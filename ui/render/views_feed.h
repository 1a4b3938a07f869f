#pragma once
// How the engine's thread feeds the two views, the same for qvl-studio's windows (ui/vulkan_views.cpp) and for
// `qvl bench --views` (offscreen_views.h): the pool map only when the pool changed (or a view asked), each step's
// attention heat (the channel throttles it), on the GPU through the backend's interop facet when the channels'
// memory is shared with the engine's own CUDA device, else on the host.
#include <array>
#include <memory>
#include <optional>

#include "render/heat_channel.h"
#include "render/pool_map_channel.h"

namespace qvl::render {

class ViewsFeed {
public:
  // cuda_uuid: the CUDA device the channels' memory was made to share with (none: frames are filled on the host).
  ViewsFeed(std::shared_ptr<PoolMapChannel> pool, std::shared_ptr<HeatChannel> heat,
            std::optional<std::array<uint8_t, 16>> cuda_uuid);

  // After steps (the app: at most every 33 ms), answers and moves; `force`: a view asked for a frame (a new size).
  void publish_pool(Engine& engine, bool force);
  // After each decode step while an attention view is set.
  void publish_attention(Engine& engine, const AttentionFrame& frame);
  // Before the model moves: imports into the old backend go with it.
  void forget_imports();

private:
  // The engine's facet when the channels' memory lives on its GPU (else nullptr: frames are filled on the host).
  DeviceInterop* facet_of(Engine& engine) const;

  std::shared_ptr<PoolMapChannel> pool_;
  std::shared_ptr<HeatChannel> heat_;
  std::optional<std::array<uint8_t, 16>> cuda_uuid_;
  PoolChangeWatch watch_;
};

}  // namespace qvl::render
