// The Vulkan views' core, headless: the shaders against the CPU colouring (any Vulkan device: lavapipe in CI, the
// NVIDIA driver on the GPU machine), the device choice and its reasons, and, where a CUDA device shares memory with
// Vulkan, the pool map drawn by CUDA into Vulkan memory and a 1,000-frame ping-pong between the two. Every device is
// made with the validation layers, and every test ends by checking that they reported nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "backend/cuda_plugin.h"
#include "core/error.h"
#include "backend/interop.h"
#include "backend/registry.h"
#include "render/picture_renderer.h"
#include "render/heat_channel.h"
#include "render/pool_map_channel.h"
#include "runtime/engine.h"

#include <map>
#include <mutex>
#include <thread>

namespace qvl::render {
namespace {


// A pool of 1-4 segments cut into blocks of random owners (seeded: frame n of the ping-pong is pool n).
MemoryReport random_pool(uint32_t seed) {
  std::mt19937 rng(seed);
  MemoryReport r;
  r.available = true;
  const char* owners[] = {"weights", "kv cache", "activations", "workspace", "other"};
  int64_t by_owner[5] = {};
  const int segments = 1 + int(rng() % 4);
  for (int s = 0; s < segments; ++s) {
    MemoryReport::Segment segment;
    segment.size = int64_t(1 + rng() % 64) << 20;
    int64_t offset = 0;
    while (offset < segment.size) {
      const int64_t size = std::min<int64_t>(segment.size - offset, int64_t(1 + rng() % 8192) << 10);
      MemoryReport::Block block{offset, size, rng() % 3 != 0, ""};
      if (block.allocated) {
        const int owner = int(rng() % 5);
        block.owner = owners[owner];
        by_owner[owner] += size;
        r.allocated += size;
      }
      segment.blocks.push_back(block);
      offset += size;
    }
    r.reserved += segment.size;
    r.segment_map.push_back(std::move(segment));
  }
  for (int o = 0; o < 5; ++o) r.by_owner.emplace_back(owners[o], by_owner[o]);
  r.capacity = rng() % 2 ? r.reserved + int64_t(rng() % 64) * (1 << 20) : -1;
  r.segments = segments;
  return r;
}

class VulkanTest : public ::testing::Test {
protected:
  void make_device(const DeviceRequest& request) {
    device = std::make_unique<VulkanDevice>(request);
    renderer = std::make_unique<PictureRenderer>(*device);
    commands = std::make_unique<CommandSlots>(*device, 2);
  }
  void SetUp() override {
    DeviceRequest request;
    request.validation = true;
    make_device(request);
  }
  void TearDown() override {
    if (!device) return;
    device->api.vkDeviceWaitIdle(device->device);
    const auto messages = device->validation_messages();
    EXPECT_TRUE(messages.empty()) << messages.size() << " validation messages, the first: " << messages.front();
  }
  std::unique_ptr<VulkanBuffer> host_buffer(uint64_t bytes) {
    return std::make_unique<VulkanBuffer>(*device, bytes, VulkanBuffer::Kind::HostVisible);
  }
  // Runs what `record` records and waits for it.
  template <typename Record> void run_once(Record record) {
    VkCommandBuffer cmd = commands->begin(0);
    record(cmd);
    commands->end(0);
    commands->submit(0, {}, {});
    device->api.vkQueueWaitIdle(device->queue);
  }
  std::vector<uint32_t> pool_map_pixels(const std::vector<uint8_t>& codes, const PoolMapGeometry& g, int capacity,
                                        ChannelOrder order) {
    auto in = host_buffer(codes.size()), out = host_buffer(codes.size() * 4);
    std::memcpy(in->mapped(), codes.data(), codes.size());
    run_once([&](VkCommandBuffer cmd) {
      renderer->record_pool_map(cmd, {in->buffer(), 0, in->bytes()}, {out->buffer(), 0, out->bytes()}, g, capacity, order);
    });
    const auto* p = static_cast<const uint32_t*>(out->mapped());
    return {p, p + codes.size()};
  }

  // The view's loop: takes the newest frame, colours it into read-back memory, waits, and checks it against the
  // report that frame was drawn from (`reports`, filled by the publisher). Returns the frames checked.
  uint64_t view_frames(PoolMapChannel& channel, const std::atomic<bool>& done, std::mutex& mutex,
                       const std::map<uint64_t, MemoryReport>& reports, const PoolMapGeometry& g) {
    const uint64_t frame_bytes = uint64_t(g.width) * g.height * 4;
    auto pixels = host_buffer(2 * aligned_region(frame_bytes));
    uint64_t checked = 0;
    for (;;) {
      channel.release_finished();
      const auto frame = channel.take_newest();
      if (!frame) {
        if (done) return checked;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      const uint32_t slot = frame->number % 2;
      const uint64_t out = slot * aligned_region(frame_bytes);
      VkCommandBuffer cmd = commands->begin(slot);
      renderer->record_pool_map(cmd, frame->data, {pixels->buffer(), out, frame_bytes}, frame->meta.geometry,
                                frame->meta.capacity_column, ChannelOrder::Rgba);
      commands->end(slot);
      if (frame->filled_on_gpu)
        commands->submit(slot, {{channel.written().handle(), frame->number}}, {{channel.read().handle(), frame->number}});
      else
        commands->submit(slot, {}, {{channel.read().handle(), frame->number}});
      if (!channel.read().wait(frame->number, 5'000'000'000ull)) {
        ADD_FAILURE() << "frame " << frame->number << " was not drawn within 5 s";
        return checked;
      }
      channel.release(frame->number);
      MemoryReport report;
      for (bool found = false; !found;) {  // the publisher records the report just after publish returns
        std::lock_guard lock(mutex);
        if (auto it = reports.find(frame->number); it != reports.end()) {
          report = it->second;
          found = true;
        }
      }
      const auto expected = colour_pool_map(draw_pool_map(pool_map_table(report), frame->meta.geometry), frame->meta.geometry,
                                            frame->meta.capacity_column, ChannelOrder::Rgba);
      const auto* p = reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(pixels->mapped()) + out);
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), p)) << "frame " << frame->number;
      ++checked;
    }
  }

  std::unique_ptr<VulkanDevice> device;
  std::unique_ptr<PictureRenderer> renderer;
  std::unique_ptr<CommandSlots> commands;
};

TEST(PoolMap, TheCpuDrawingPlacesBlocksByTheirBytes) {
  // One 1,000-byte segment: weights [0, 500), free [500, 750), kv cache [750, 1000); 100 columns of 10 bytes.
  MemoryReport r;
  r.by_owner = {{"weights", 500}, {"kv cache", 250}};
  r.allocated = 750;
  r.reserved = 1000;
  r.capacity = 2000;
  r.segment_map = {{1000, {{0, 500, true, "weights"}, {500, 250, false, ""}, {750, 250, true, "kv cache"}}}};
  const PoolMapGeometry g{100, 20, 4};
  const auto codes = draw_pool_map(pool_map_table(r), g);
  // The bar against the capacity (2,000 bytes, 20 a column): weights 25 columns, kv 12.5, cached free 12.5, then none.
  EXPECT_EQ(codes[0], kPoolWeights);
  EXPECT_EQ(codes[24], kPoolWeights);
  EXPECT_EQ(codes[25], kPoolKvCache);
  EXPECT_EQ(codes[37], kPoolKvCache);
  EXPECT_EQ(codes[38], kPoolFree);
  EXPECT_EQ(codes[49], kPoolFree);
  EXPECT_EQ(codes[50], kPoolNothing);
  EXPECT_EQ(pool_map_capacity_column(r, g), 99);
  EXPECT_EQ(codes[4 * 100 + 10], kPoolNothing);  // the empty row under the bar
  // The segment's band: rows 5..19 (the one segment takes all 15, its last row left empty).
  const uint8_t* row = &codes[5 * 100];
  EXPECT_EQ(row[0], kPoolWeights);
  EXPECT_EQ(row[49], kPoolWeights);
  EXPECT_EQ(row[50], kPoolFree | kPoolEdge);
  EXPECT_EQ(row[51], kPoolFree);
  EXPECT_EQ(row[75], kPoolKvCache | kPoolEdge);
  EXPECT_EQ(row[99], kPoolKvCache);
  EXPECT_EQ(codes[19 * 100 + 10], kPoolNothing);
  EXPECT_EQ(codes[18 * 100 + 10], kPoolWeights);
}

TEST(PoolMap, ShapesOutsideTheLimitsAreRefused) {
  EXPECT_THROW(draw_pool_map({}, {0, 100, 4}), Error);
  EXPECT_THROW(draw_pool_map({}, {100, 5, 4}), Error);
  EXPECT_THROW(draw_pool_map({}, {5000, 100, 4}), Error);
}

TEST_F(VulkanTest, PoolMapPixelsMatchTheCpuColouringInBothChannelOrders) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const MemoryReport r = random_pool(seed);
    const PoolMapGeometry g{301 + int(seed) * 17, 97 + int(seed) * 5, 9};
    const auto codes = draw_pool_map(pool_map_table(r), g);
    const int capacity = pool_map_capacity_column(r, g);
    for (ChannelOrder order : {ChannelOrder::Rgba, ChannelOrder::Bgra})
      ASSERT_EQ(pool_map_pixels(codes, g, capacity, order), colour_pool_map(codes, g, capacity, order))
          << "seed " << seed << ", " << (order == ChannelOrder::Rgba ? "RGBA" : "BGRA") << " on " << device->name;
  }
}

TEST_F(VulkanTest, HeatmapPixelsMatchTheCpuBlend) {
  std::mt19937 rng(7);
  const HeatmapShape s{333, 250, 17, 12, 192};
  std::vector<uint32_t> picture(size_t(s.width) * s.height);
  for (auto& p : picture) p = uint32_t(rng()) | 0xff000000u;
  std::vector<float> heat(size_t(s.grid_width) * s.grid_height);
  for (auto& h : heat) h = float(rng() & 0xff);
  heat[0] = 0;
  heat[1] = 255;
  auto pic = host_buffer(picture.size() * 4), grid = host_buffer(heat.size() * 4), out = host_buffer(picture.size() * 4);
  std::memcpy(pic->mapped(), picture.data(), picture.size() * 4);
  std::memcpy(grid->mapped(), heat.data(), heat.size() * 4);
  for (ChannelOrder order : {ChannelOrder::Rgba, ChannelOrder::Bgra}) {
    run_once([&](VkCommandBuffer cmd) {
      renderer->record_heatmap(cmd, {pic->buffer(), 0, pic->bytes()}, {grid->buffer(), 0, grid->bytes()},
                               {out->buffer(), 0, out->bytes()}, s, order);
    });
    const auto* p = static_cast<const uint32_t*>(out->mapped());
    ASSERT_EQ(std::vector<uint32_t>(p, p + picture.size()), colour_heatmap(picture, heat, s, order));
  }
}

TEST_F(VulkanTest, TheStagedChannelCarriesEveryFrameItPublishes) {
  // Where memory cannot be shared with CUDA the engine's thread draws the codes on the host into mapped memory:
  // the same protocol, frames dropped (never waited for) while the view reads their slot.
  PoolMapChannel channel(*device, false);
  const PoolMapGeometry g{320, 90, 8};
  channel.set_geometry(g);
  std::mutex mutex;
  std::map<uint64_t, MemoryReport> reports;
  std::atomic<bool> done{false};
  uint64_t checked = 0;
  std::thread viewer([&] { checked = view_frames(channel, done, mutex, reports, g); });
  for (uint32_t i = 1; i <= 300; ++i) {
    const MemoryReport r = random_pool(1000 + i);
    if (channel.publish(r, nullptr)) {
      std::lock_guard lock(mutex);
      reports[channel.frames_published()] = r;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  done = true;
  viewer.join();
  EXPECT_EQ(channel.frames_published() + channel.frames_dropped(), 300u);
  EXPECT_GT(checked, 10u);
  EXPECT_THROW(PoolMapChannel(*device, true), Error);  // no CUDA device here to share with
  PoolMapChannel shared_less(*device, false);
  EXPECT_TRUE(shared_less.publish(random_pool(1), nullptr));
}

TEST_F(VulkanTest, TheDeviceChoiceSaysWhyMemoryIsNotShared) {
  EXPECT_EQ(device->interop_reason(), "no CUDA device");
  DeviceRequest request;
  request.validation = true;
  request.cuda_uuid = std::array<uint8_t, 16>{0xde, 0xad, 0xbe, 0xef};
  VulkanDevice other(request);
  EXPECT_NE(other.interop_reason().find("no Vulkan device is the CUDA device (UUID deadbeef"), std::string::npos)
      << other.interop_reason();
  EXPECT_THROW(VulkanBuffer(other, 4096, VulkanBuffer::Kind::Shared), Error);
  EXPECT_TRUE(other.validation_messages().empty());
}

TEST(VulkanValidation, TheLayersReportMisuse) {
  // So that "no validation messages" at the end of every test means something: a buffer of zero bytes is invalid.
  DeviceRequest request;
  request.validation = true;
  VulkanDevice device(request);
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = 0;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  VkBuffer buffer = VK_NULL_HANDLE;
  if (device.api.vkCreateBuffer(device.device, &info, nullptr, &buffer) == VK_SUCCESS && buffer)
    device.api.vkDestroyBuffer(device.device, buffer, nullptr);
  const auto messages = device.validation_messages();
  ASSERT_FALSE(messages.empty());
  EXPECT_NE(messages.front().find("size"), std::string::npos) << messages.front();
}

TEST(VulkanLoader, NoLoaderIsAClearError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: the loader is opened once per process
  EXPECT_EXIT(
      {
        setenv("QVL_VULKAN_LOADER", "", 1);
        try {
          VulkanDevice device(DeviceRequest{});
        } catch (const Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "no Vulkan loader");
}

// ---- Interop: needs a CUDA device that Vulkan can share memory with ----

class InteropTest : public VulkanTest {
protected:
  void SetUp() override {
    if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
    cuda = make_cuda_backend();
    facet = cuda->interop();
    ASSERT_NE(facet, nullptr);
    DeviceRequest request;
    request.validation = true;
    request.cuda_uuid = cuda->device_identity()->uuid;
    make_device(request);
    if (!device->shares_memory_with_cuda())
      GTEST_SKIP() << "skipped: Vulkan cannot share memory with " << cuda->name() << ": " << device->interop_reason();
  }
  void TearDown() override {
    if (facet)
      for (InteropHandle h : imports) facet->release(h);
    VulkanTest::TearDown();
  }
  InteropHandle import(const VulkanBuffer& buffer) {
    imports.push_back(facet->import_memory(buffer.export_fd(), buffer.allocation_bytes(), buffer.dedicated()));
    return imports.back();
  }
  InteropHandle import(const TimelineSemaphore& semaphore) {
    imports.push_back(facet->import_timeline_semaphore(semaphore.export_fd()));
    return imports.back();
  }

  std::unique_ptr<Backend> cuda;
  DeviceInterop* facet = nullptr;
  std::vector<InteropHandle> imports;
};

TEST_F(InteropTest, ThePoolMapCudaDrawsIsTheCpuDrawing) {
  // The CUDA backend's own pool (with a few tensors in it) and random ones.
  std::vector<Tensor> held{cuda->alloc({1 << 20}), cuda->alloc({3 << 18}), cuda->alloc_cache({1 << 19})};
  held.erase(held.begin() + 1);
  const PoolMapGeometry g{512, 160, 12};
  const uint64_t bytes = uint64_t(g.width) * g.height;
  VulkanBuffer shared(*device, bytes, VulkanBuffer::Kind::Shared);
  auto codes_back = host_buffer(bytes), pixels = host_buffer(bytes * 4);
  const InteropHandle memory = import(shared);
  TimelineSemaphore written(*device, true);
  const InteropHandle written_by_cuda = import(written);
  for (uint32_t frame = 1; frame <= 4; ++frame) {
    const MemoryReport r = frame == 1 ? cuda->memory_report(true) : random_pool(100 + frame);
    facet->draw_pool_map(r, g, memory, 0);
    facet->signal(written_by_cuda, frame);
    const int capacity = pool_map_capacity_column(r, g);
    VkCommandBuffer cmd = commands->begin(0);
    const VkBufferCopy copy{0, 0, bytes};
    device->api.vkCmdCopyBuffer(cmd, shared.buffer(), codes_back->buffer(), 1, &copy);
    renderer->record_pool_map(cmd, {shared.buffer(), 0, bytes}, {pixels->buffer(), 0, pixels->bytes()}, g, capacity,
                              ChannelOrder::Bgra);
    commands->end(0);
    commands->submit(0, {{written.handle(), frame}}, {});
    device->api.vkQueueWaitIdle(device->queue);
    const auto expected = draw_pool_map(pool_map_table(r), g);
    const auto* c = static_cast<const uint8_t*>(codes_back->mapped());
    ASSERT_EQ(std::vector<uint8_t>(c, c + bytes), expected) << "frame " << frame;
    const auto* p = static_cast<const uint32_t*>(pixels->mapped());
    ASSERT_EQ(std::vector<uint32_t>(p, p + bytes), colour_pool_map(expected, g, capacity, ChannelOrder::Bgra));
  }
}

TEST_F(InteropTest, AThousandFramePingPongKeepsEveryFrame) {
  // CUDA draws frame n into slot n % 2 once Vulkan has finished reading that slot (frame n - 2), then signals
  // `written` = n; Vulkan waits for it, colours the slot into read-back slot n % 2 and signals `read` = n. The host
  // queues CUDA's frame n + 1 before it checks frame n, so both sides are busy at once; every frame's pixels must be
  // exactly that frame's (a missing wait shows as a torn or stale frame).
  constexpr uint32_t kFrames = 1000;
  const PoolMapGeometry g{512, 160, 12};
  const uint64_t bytes = uint64_t(g.width) * g.height, slot = aligned_region(bytes);
  VulkanBuffer shared(*device, 2 * slot, VulkanBuffer::Kind::Shared);
  auto pixels = host_buffer(2 * aligned_region(bytes * 4));
  const InteropHandle memory = import(shared);
  TimelineSemaphore written(*device, true), read(*device, true);
  const InteropHandle written_by_cuda = import(written), read_by_vulkan = import(read);
  for (uint32_t s = 0; s < 2; ++s) {
    VkCommandBuffer cmd = commands->begin(s);
    renderer->record_pool_map(cmd, {shared.buffer(), s * slot, bytes},
                              {pixels->buffer(), s * aligned_region(bytes * 4), bytes * 4}, g, -1, ChannelOrder::Rgba);
    commands->end(s);
  }
  auto cuda_frame = [&](uint32_t n) {
    if (n > 2) facet->wait(read_by_vulkan, n - 2);
    facet->draw_pool_map(random_pool(n), g, memory, (n % 2) * slot);
    facet->signal(written_by_cuda, n);
  };
  std::vector<double> frame_ms;
  cuda_frame(1);
  for (uint32_t n = 1; n <= kFrames; ++n) {
    const auto start = std::chrono::steady_clock::now();
    commands->submit(n % 2, {{written.handle(), n}}, {{read.handle(), n}});
    if (n < kFrames) cuda_frame(n + 1);
    ASSERT_TRUE(read.wait(n, 5'000'000'000ull)) << "frame " << n << " was not drawn within 5 s";
    frame_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    const auto expected = colour_pool_map(draw_pool_map(pool_map_table(random_pool(n)), g), g, -1, ChannelOrder::Rgba);
    const auto* p = reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(pixels->mapped()) +
                                                      (n % 2) * aligned_region(bytes * 4));
    ASSERT_TRUE(std::equal(expected.begin(), expected.end(), p)) << "frame " << n << " differs from its drawing";
  }
  commands->wait_all();  // the semaphores and buffers die with this scope
  std::sort(frame_ms.begin(), frame_ms.end());
  std::printf("[ping-pong] %u frames %dx%d on %s: frame (CUDA draw + Vulkan colour + host wait) median %.3f ms, "
              "p99 %.3f ms\n",
              kFrames, g.width, g.height, device->name.c_str(), frame_ms[frame_ms.size() / 2],
              frame_ms[frame_ms.size() * 99 / 100]);
}

TEST_F(InteropTest, TheHeatCudaCopiesIsBlendedLikeTheCpu) {
  // An attention frame's heat on the CUDA backend, copied by the facet into the heat channel's Vulkan memory (no
  // host copy), blended over a picture by the shader: the CPU's blend of the same levels.
  std::mt19937 rng(11);
  const int64_t gw = 23, gh = 17;
  Tensor levels = Tensor::empty(DType::F32, {gw * gh});
  for (int64_t i = 0; i < levels.numel(); ++i) levels.data<float>()[i] = float(rng() % 256);
  const Tensor heat = cuda->from_host(levels);
  HeatChannel channel(*device, true);
  ASSERT_TRUE(channel.publish({&heat, cuda.get(), gh, gw, 0, 3, -1, 9}, facet));
  std::optional<HeatChannel::Frame> frame;
  for (int i = 0; i < 1000 && !frame; ++i) {
    frame = channel.take_newest();
    if (!frame) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(frame) << "the copy never reached the written semaphore";
  EXPECT_EQ(frame->meta.grid_w, uint32_t(gw));
  EXPECT_EQ(frame->meta.layer, 3);
  const HeatmapShape shape{301, 217, uint32_t(gw), uint32_t(gh), 176};
  std::vector<uint32_t> picture(size_t(shape.width) * shape.height);
  for (auto& p : picture) p = uint32_t(rng()) | 0xff000000u;
  auto pic = host_buffer(picture.size() * 4), out = host_buffer(picture.size() * 4);
  std::memcpy(pic->mapped(), picture.data(), picture.size() * 4);
  VkCommandBuffer cmd = commands->begin(0);
  renderer->record_heatmap(cmd, {pic->buffer(), 0, pic->bytes()}, frame->data, {out->buffer(), 0, out->bytes()}, shape,
                           ChannelOrder::Bgra);
  commands->end(0);
  commands->submit(0, {{channel.written().handle(), frame->number}}, {{channel.read().handle(), frame->number}});
  ASSERT_TRUE(channel.read().wait(frame->number, 5'000'000'000ull));
  channel.release(frame->number);
  const auto* p = static_cast<const uint32_t*>(out->mapped());
  const std::span<const float> host_levels(levels.data<float>(), size_t(levels.numel()));
  EXPECT_TRUE(std::vector<uint32_t>(p, p + picture.size()) == colour_heatmap(picture, host_levels, shape, ChannelOrder::Bgra));
  commands->wait_all();
  channel.forget_imports();
}

// The app's way under stress: the engine's thread publishes the pool after every token (the app: only when it
// changed) and offers each step's heat, while the view's thread takes the newest frame and colours it (here into
// read-back memory, checked against the report that frame was drawn from). The engine's pool map comes from its own
// CUDA pool while it answers. (What the views cost decode as the app feeds them is `qvl bench --views`.)
class EngineFeed : public TokenSink {
public:
  EngineFeed(Engine& engine, PoolMapChannel& channel, HeatChannel& heat) : engine_(engine), channel_(channel), heat_(heat) {}
  void on_attention(const AttentionFrame& frame) override {
    if (heat_.publish(frame, engine_.device_interop())) ++heat_frames;
  }
  void on_token(int32_t id, const std::string&) override {
    if (id < 0) return;
    const MemoryReport report = engine_.memory_report(true);
    if (channel_.publish(report, engine_.device_interop())) {
      std::lock_guard lock(mutex);
      reports[channel_.frames_published()] = report;
    }
  }
  std::mutex mutex;
  std::map<uint64_t, MemoryReport> reports;
  uint64_t heat_frames = 0;

private:
  Engine& engine_;
  PoolMapChannel& channel_;
  HeatChannel& heat_;
};

TEST_F(InteropTest, TheEnginesPoolIsDrawnByCudaWhileItAnswers) {
  EngineOptions options;
  options.device = "cuda";
  const auto engine = Engine::load(std::filesystem::path(QVL_TEST_RESOURCE_DIR) / "models" / "demo-shapes", options);
  ASSERT_EQ(engine->device_identity()->uuid, cuda->device_identity()->uuid);
  PoolMapChannel channel(*device, true);
  const PoolMapGeometry g{640, 200, 12};
  channel.set_geometry(g);
  HeatChannel heat(*device, true);
  GenerateRequest request;
  // A picture, so that the attention view has patches to tap (the scene, 12 x 12 merged patches).
  request.messages = {{"user", {ContentItem::image(), ContentItem::make_text("Describe a long journey across many lands.")}}};
  request.images = {ImageInput::file(std::filesystem::path(QVL_TEST_RESOURCE_DIR) / "samples" / "scene-2.png")};
  request.max_new_tokens = 400;
  request.ignore_eos = true;

  engine->set_attention_view({0, -1});
  EngineFeed feed(*engine, channel, heat);
  std::atomic<bool> done{false};
  std::thread heat_reader([&] {  // takes and releases the heat's frames as a view would
    while (!done) {
      if (const auto f = heat.take_newest()) heat.release(f->number);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  uint64_t checked = 0;
  std::thread viewer([&] { checked = view_frames(channel, done, feed.mutex, feed.reports, g); });
  engine->generate(request, &feed);
  done = true;
  viewer.join();
  heat_reader.join();
  commands->wait_all();
  EXPECT_GT(checked, 0u);
  EXPECT_GT(feed.heat_frames, 5u);
  std::printf("[engine feed] %llu pool frames published, %llu dropped, %llu drawn and checked; %llu heat frames\n",
              (unsigned long long)channel.frames_published(), (unsigned long long)channel.frames_dropped(),
              (unsigned long long)checked, (unsigned long long)feed.heat_frames);
  engine->set_attention_view({-1, -1});
  channel.forget_imports();
  heat.forget_imports();
}

}  // namespace
}  // namespace qvl::render
