#pragma once
// The GPU's vital signs while it answers: clocks, temperature, power against its limit, how busy it is, and why its
// clocks are held back (laptop Pascal parts throttle on heat and power). Read from NVIDIA's management library,
// opened at run time (libnvidia-ml.so.1 comes with the driver; without it, the reason), or replayed from a recording
// ($QVL_GPU_VITALS_RECORDING: a `qvl bench` JSON's "gpu_vitals", for tests and screenshots where no GPU exists).
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace qvl {

struct GpuVitals {
  double seconds = 0;  // when, since the source was opened
  unsigned sm_clock_mhz = 0, max_sm_clock_mhz = 0, memory_clock_mhz = 0;
  unsigned temperature_c = 0;
  double power_w = 0, power_limit_w = 0;
  unsigned busy_percent = 0;      // of the last sample period, a kernel was running
  uint64_t throttle_reasons = 0;  // NVML's clock-event reason bits
  // What the part does not report (NVML_ERROR_NOT_SUPPORTED, common on GeForce and laptop parts): left out of the view.
  bool busy_reported = true, reasons_reported = true;
};
nlohmann::json to_json(const GpuVitals& v);
GpuVitals gpu_vitals_from_json(const nlohmann::json& j);  // throws qvl::Error naming a missing field

// Every reason bit set, named ("thermal slowdown (software)", "power cap", ...).
std::vector<std::string> throttle_names(uint64_t reasons);
// The reasons that slow an answer: heat, the power cap, a hardware slowdown or power brake (not "idle", sync boost
// or a clock setting).
constexpr uint64_t kSlowingReasons = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;
inline bool throttles_work(uint64_t reasons) { return reasons & kSlowingReasons; }

class GpuVitalsSource {
public:
  virtual ~GpuVitalsSource() = default;
  // Not thread-safe: one caller at a time. Throws qvl::Error when the driver refuses a read.
  virtual GpuVitals sample() = 0;
  virtual const std::string& device_name() const = 0;
};

// The NVML device with this UUID (CUDA's, so the numbers are the card the model runs on; without one, device 0); or
// the recording $QVL_GPU_VITALS_RECORDING names. nullptr with *reason when neither can be had ($QVL_NVML_LIBRARY names
// another library file; empty: none, for tests).
std::unique_ptr<GpuVitalsSource> open_gpu_vitals(const std::optional<std::array<uint8_t, 16>>& uuid, std::string* reason);

// Samples a source every `period_ms` on a thread of its own, keeping every sample (bench runs of seconds).
class GpuVitalsRecorder {
public:
  GpuVitalsRecorder(GpuVitalsSource& source, int period_ms);
  ~GpuVitalsRecorder();  // stops
  std::vector<GpuVitals> stop();
  // The recording as qvl bench writes it: the device, each sample, and a summary (clocks min/median/max, the hottest,
  // the most power, the reasons seen, whether any slowed the work).
  static nlohmann::json report(const std::string& device, const std::vector<GpuVitals>& samples);

private:
  GpuVitalsSource& source_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  // The thread's alone until stop() has joined it (nothing reads them while it runs).
  std::vector<GpuVitals> samples_;
  std::string error_;
};

}  // namespace qvl
