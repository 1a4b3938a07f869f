#include "render/views_feed.h"

namespace qvl::render {

ViewsFeed::ViewsFeed(std::shared_ptr<PoolMapChannel> pool, std::shared_ptr<HeatChannel> heat,
                     std::optional<std::array<uint8_t, 16>> cuda_uuid)
    : pool_(std::move(pool)), heat_(std::move(heat)), cuda_uuid_(cuda_uuid) {}

DeviceInterop* ViewsFeed::facet_of(Engine& engine) const {
  if (!pool_->shared_with_cuda() || !cuda_uuid_) return nullptr;
  const auto device = engine.device_identity();
  return device && device->uuid == *cuda_uuid_ ? engine.device_interop() : nullptr;
}

void ViewsFeed::publish_pool(Engine& engine, bool force) {
  const MemoryReport quick = engine.memory_report(false);
  if (!quick.available) return;  // the CPU has no pool (the view says so)
  if (!watch_.changed(quick) && !force) return;
  pool_->publish(engine.memory_report(true), facet_of(engine));
}

void ViewsFeed::publish_attention(Engine& engine, const AttentionFrame& frame) {
  // The heat lives on the tapped layer's backend: a layer a memory plan left on the CPU has no GPU copy to make.
  DeviceInterop* facet = facet_of(engine);
  heat_->publish(frame, facet && frame.backend->interop() == facet ? facet : nullptr);
}

void ViewsFeed::forget_imports() {
  pool_->forget_imports();
  heat_->forget_imports();
}

}  // namespace qvl::render
