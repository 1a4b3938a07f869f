// The GPU's vital signs: reason bits named as NVML defines them, recordings replayed and refused when malformed, a
// machine without NVML told why, and a recorder's summary. (Real NVML reads run where a GPU is:
// GpuVitals.NvmlReadsTheCudaDevice, and `qvl bench` on the GPU machine.)
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cuda_plugin.h"
#include "backend/gpu_vitals.h"
#include "core/error.h"
#include "test_support.h"

namespace qvl {
namespace {

TEST(GpuVitals, ThrottleReasonsAreNamedAndOnlyHeatAndPowerSlowTheWork) {
  EXPECT_TRUE(throttle_names(0).empty());
  EXPECT_EQ(throttle_names(0x24), (std::vector<std::string>{"power cap", "thermal slowdown (software)"}));
  EXPECT_EQ(throttle_names(0x1 | 0x40 | 0x1000), (std::vector<std::string>{"idle", "thermal slowdown (hardware)", "other"}));
  for (uint64_t slows : {0x4, 0x8, 0x20, 0x40, 0x80}) EXPECT_TRUE(throttles_work(slows)) << slows;
  for (uint64_t harmless : {0x0, 0x1, 0x2, 0x10, 0x100}) EXPECT_FALSE(throttles_work(harmless)) << harmless;
}

TEST(GpuVitals, ARecordingIsReplayedInOrderAndRoundAgain) {
  test::TempDir dir;
  GpuVitals a, b;
  a.sm_clock_mhz = 1404, a.temperature_c = 94, a.throttle_reasons = 0x24, a.power_w = 24.9;
  b.sm_clock_mhz = 1227, b.temperature_c = 96, b.seconds = 0.5;
  const nlohmann::json recording = GpuVitalsRecorder::report("NVIDIA GeForce MX350", {a, b});
  test::write_bytes(dir / "bench.json", nlohmann::json{{"gpu_vitals", recording}}.dump());  // a whole bench JSON
  setenv("QVL_GPU_VITALS_RECORDING", (dir / "bench.json").c_str(), 1);
  std::string reason;
  const auto source = open_gpu_vitals(std::nullopt, &reason);
  unsetenv("QVL_GPU_VITALS_RECORDING");
  ASSERT_TRUE(source) << reason;
  EXPECT_EQ(source->device_name(), "NVIDIA GeForce MX350 (recorded)");
  for (const unsigned expected : {1404u, 1227u, 1404u}) EXPECT_EQ(source->sample().sm_clock_mhz, expected);
  EXPECT_EQ(recording["summary"]["sm_clock_mhz_min"], 1227);
  EXPECT_EQ(recording["summary"]["temperature_c_max"], 96);
  EXPECT_EQ(recording["summary"]["throttled"], true);
  EXPECT_EQ(recording["summary"]["throttle_reasons_seen"], (nlohmann::json{"power cap", "thermal slowdown (software)"}));
}

TEST(GpuVitals, AMalformedRecordingNamesWhatIsWrong) {
  test::TempDir dir;
  auto refused = [&](const std::string& text) {
    test::write_bytes(dir / "r.json", text);
    setenv("QVL_GPU_VITALS_RECORDING", (dir / "r.json").c_str(), 1);
    std::string reason;
    const auto source = open_gpu_vitals(std::nullopt, &reason);
    unsetenv("QVL_GPU_VITALS_RECORDING");
    EXPECT_FALSE(source);
    return reason;
  };
  EXPECT_NE(refused("[]").find("not a GPU vitals recording"), std::string::npos);
  EXPECT_NE(refused("{\"samples\": []}").find("non-empty \"samples\""), std::string::npos);
  EXPECT_NE(refused("{\"samples\": [{\"seconds\": 0}]}").find("\"sm_clock_mhz\" is missing"), std::string::npos);
}

TEST(GpuVitals, WithoutNvmlTheReasonIsSaid) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: NVML is opened once per process
  EXPECT_EXIT(
      {
        setenv("QVL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
        std::string reason;
        const bool opened = open_gpu_vitals(std::nullopt, &reason) != nullptr;
        std::fprintf(stderr, "%s\n", reason.c_str());
        std::exit(opened ? 0 : 3);
      },
      ::testing::ExitedWithCode(3), "no NVIDIA management library \\(/nonexistent/libnvidia-ml.so.1: it comes with NVIDIA's driver\\)");
}

TEST(GpuVitals, NvmlReadsTheCudaDevice) {
  if (!cuda_plugin().usable) GTEST_SKIP() << "skipped: no CUDA device (" << cuda_plugin().reason << ")";
  std::string reason;
  const auto source = open_gpu_vitals(cuda_device_uuid(0), &reason);
  ASSERT_TRUE(source) << reason;
  GpuVitalsRecorder recorder(*source, 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  const std::vector<GpuVitals> samples = recorder.stop();
  ASSERT_GE(samples.size(), 3u);
  for (const GpuVitals& v : samples) {
    EXPECT_GT(v.sm_clock_mhz, 0u);
    EXPECT_LE(v.sm_clock_mhz, v.max_sm_clock_mhz);
    EXPECT_GT(v.memory_clock_mhz, 0u);
    EXPECT_GT(v.temperature_c, 10u);
    EXPECT_LT(v.temperature_c, 110u);
    EXPECT_LE(v.busy_percent, 100u);
  }
  std::printf("[ info ] %s: SM %u of %u MHz, %u C, %.0f of %.0f W\n", source->device_name().c_str(),
              samples.back().sm_clock_mhz, samples.back().max_sm_clock_mhz, samples.back().temperature_c,
              samples.back().power_w, samples.back().power_limit_w);
}

}  // namespace
}  // namespace qvl
