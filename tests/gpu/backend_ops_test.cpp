// The CUDA backend's services around the ops: timing, the pool report, bandwidth, the SM61 storage rule, out of
// memory. The ops themselves are compared with the CPU backend by qvl-test-backend-ops (test_backend_ops.cpp).
// Without a usable GPU each test says it was skipped and why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "backend/backend.h"
#include "backend/cuda_plugin.h"
#include "runtime/profiler.h"

namespace qvl {
namespace {

class CudaOps : public ::testing::Test {
protected:
  void SetUp() override {
    if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
    gpu = make_cuda_backend();
    cpu = make_cpu_backend();
  }
  Tensor random(Shape shape, DType dtype = DType::F32, float scale = 1.0f) {
    Tensor t = Tensor::empty(DType::F32, std::move(shape));
    std::normal_distribution<float> normal(0.0f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
    return dtype == DType::F32 ? t : t.to(dtype);
  }
  // max |gpu - cpu| / max |cpu|
  static double error(const Tensor& gpu_host, const Tensor& cpu_result) {
    const auto a = gpu_host.to_f32_vector(), b = cpu_result.to_f32_vector();
    EXPECT_EQ(a.size(), b.size());
    double diff = 0, scale = 1e-30;
    for (std::size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, double(std::fabs(a[i] - b[i])));
      scale = std::max(scale, double(std::fabs(b[i])));
    }
    return diff / scale;
  }
  std::unique_ptr<Backend> gpu, cpu;
  std::mt19937 rng{11};
};

TEST_F(CudaOps, TimesKernelsWithEventsWithoutWaiting) {
  Profiler profiler;
  gpu->set_timing_sink(&profiler);
  const Tensor x = gpu->from_host(random({4, 1024}));
  const LinearWeights w = gpu->upload_linear(random({4096, 1024}, DType::BF16), nullptr);
  Tensor y = gpu->alloc({4, 4096});
  for (int i = 0; i < 10; ++i) gpu->linear(x, w, y);
  gpu->collect_timings(true);
  gpu->set_timing_sink(nullptr);
  const auto table = profiler.summary();
  ASSERT_EQ(table.size(), 1u);
  EXPECT_EQ(table[0].name, "linear 4096x1024 bf16 m<=4");
  EXPECT_EQ(table[0].calls, 10);
  EXPECT_GT(table[0].total_ms, 0.0);
  EXPECT_GT(table[0].gb_per_s, 1.0);  // 8 MB per call: any real GPU moves it at more than 1 GB/s
  const auto events = profiler.events();
  for (std::size_t i = 1; i < events.size(); ++i) EXPECT_GE(events[i].start_ms, events[i - 1].start_ms);  // stream order
}

TEST_F(CudaOps, ReportsPoolOccupancyByOwnerAndTheBlockMap) {
  EXPECT_FALSE(cpu->memory_report(true).available);
  const Tensor w = gpu->upload(random({256, 1024}, DType::BF16), WeightRole::Matrix);  // 512 KiB of weights
  const Tensor a = gpu->alloc({1000});                              // 4000 B of activations
  const MemoryReport r = gpu->memory_report(true);
  ASSERT_TRUE(r.available);
  int64_t weights = 0, activations = 0;
  for (const auto& [owner, bytes] : r.by_owner) {
    if (owner == "weights") weights = bytes;
    if (owner == "activations") activations = bytes;
  }
  EXPECT_EQ(weights, 256 * 1024 * 2);
  EXPECT_EQ(activations, 4096);  // rounded to 512-byte blocks
  EXPECT_GE(r.reserved, r.allocated);
  ASSERT_FALSE(r.segment_map.empty());
  for (const auto& seg : r.segment_map) {
    int64_t covered = 0;
    for (const auto& b : seg.blocks) {
      EXPECT_EQ(b.offset, covered);  // blocks tile their segment
      covered += b.size;
    }
    EXPECT_EQ(covered, seg.size);
  }
}

TEST_F(CudaOps, MeasuresDeviceReadBandwidth) {
  const double bandwidth = gpu->measure_read_bandwidth();
  EXPECT_GT(bandwidth, 50e9);    // any CUDA GPU worth running reads faster than 50 GB/s (a GTX 1050: ~110)
  EXPECT_LT(bandwidth, 20e12);   // and no GPU reads 20 TB/s: a wrong byte count would show here
  std::printf("device read bandwidth: %.0f GB/s\n", bandwidth / 1e9);
}

TEST_F(CudaOps, Sm61ProfileStoresF16AndMatchesTheCpu) {
  auto pascal = make_cuda_backend(0, 0, "sm61");
  EXPECT_NE(pascal->name().find("profile sm61"), std::string::npos) << pascal->name();
  const Tensor w = random({96, 512}, DType::BF16, 0.05f), x = random({1, 512});
  const LinearWeights wg = pascal->upload_linear(w, nullptr);
  EXPECT_EQ(wg.weight.dtype(), DType::F16);  // Pascal has no bf16: stored as f16, computed in f32
  EXPECT_EQ(wg.format, WeightFormat::F16);
  Tensor y_cpu = cpu->alloc({1, 96}), y_gpu = pascal->alloc({1, 96});
  cpu->linear(x, LinearWeights::of(w), y_cpu);
  pascal->linear(pascal->from_host(x), wg, y_gpu);
  EXPECT_LT(error(pascal->to_host(y_gpu), y_cpu), 1e-5);
  Tensor huge = Tensor::empty(DType::F32, {2});
  huge.data<float>()[0] = 1e6f;  // representable in bf16, not in f16
  huge.data<float>()[1] = 1.0f;
  EXPECT_THROW(pascal->upload(huge.to(DType::BF16), WeightRole::Vector), std::exception);
  EXPECT_EQ(make_cuda_backend(0, 0, "native")->upload(w, WeightRole::Matrix).dtype(), DType::BF16);
}

// A backend's facets: the device behind it (its UUID, which Vulkan interop matches) and its limits.
TEST_F(CudaOps, ReportsItsDeviceAndLimits) {
  const std::optional<DeviceIdentity> id = gpu->device_identity();
  ASSERT_TRUE(id.has_value());
  EXPECT_NE(gpu->name().find(id->name), std::string::npos) << gpu->name();
  EXPECT_NE(id->uuid, (std::array<uint8_t, 16>{})) << "a CUDA device has a UUID";
  EXPECT_FALSE(cpu->device_identity().has_value());
  EXPECT_GT(gpu->limits().block_sparse_min_queries, 1);  // the tiled kernels' query blocks
}

TEST_F(CudaOps, ReportsOutOfMemoryWithNumbers) {
  auto small = make_cuda_backend(0, 64 << 20);  // pretend the card has 64 MiB
  try {
    small->alloc({int64_t(100) << 20});  // 400 MB of f32
    FAIL() << "allocated past the pool capacity";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("64.0 MiB capacity"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(small->alloc({1024}));  // still usable
}

}  // namespace
}  // namespace qvl
