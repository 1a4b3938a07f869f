#include "backend/gpu_vitals.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace qvl {

namespace {

// NVML's C interface, as much as is used (nvml.h is not needed to build: the library is opened at run time).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned gpu, memory;
};
constexpr int kClockSm = 1, kClockMemory = 2, kTemperatureGpu = 0;
constexpr NvmlReturn kNotSupported = 3;

struct Nvml {
  NvmlReturn (*init)();
  const char* (*error_string)(NvmlReturn);
  NvmlReturn (*by_uuid)(const char*, NvmlDevice*);
  NvmlReturn (*by_index)(unsigned, NvmlDevice*);
  NvmlReturn (*name)(NvmlDevice, char*, unsigned);
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*);
  NvmlReturn (*max_clock)(NvmlDevice, int, unsigned*);
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned*);
  NvmlReturn (*power)(NvmlDevice, unsigned*);
  NvmlReturn (*power_limit)(NvmlDevice, unsigned*);
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*);
  NvmlReturn (*throttle)(NvmlDevice, unsigned long long*);
};

// Opened and initialised once per process (and left open: the driver's library stays for the process anyway).
const Nvml* nvml(std::string* reason) {
  static const auto loaded = [] {
    std::pair<std::optional<Nvml>, std::string> out;
    const char* env = std::getenv("QVL_NVML_LIBRARY");
    const std::string file = env ? env : "libnvidia-ml.so.1";
    void* handle = file.empty() ? nullptr : dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      out.second = file.empty() ? "NVML is turned off ($QVL_NVML_LIBRARY is empty)"
                                : "no NVIDIA management library (" + file + ": it comes with NVIDIA's driver)";
      return out;
    }
    Nvml n{};
    bool complete = true;
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
      complete = complete && fn;
    };
    get(n.init, "nvmlInit_v2");
    get(n.error_string, "nvmlErrorString");
    get(n.by_uuid, "nvmlDeviceGetHandleByUUID");
    get(n.by_index, "nvmlDeviceGetHandleByIndex_v2");
    get(n.name, "nvmlDeviceGetName");
    get(n.clock, "nvmlDeviceGetClockInfo");
    get(n.max_clock, "nvmlDeviceGetMaxClockInfo");
    get(n.temperature, "nvmlDeviceGetTemperature");
    get(n.power, "nvmlDeviceGetPowerUsage");
    get(n.power_limit, "nvmlDeviceGetEnforcedPowerLimit");
    get(n.utilization, "nvmlDeviceGetUtilizationRates");
    n.throttle = reinterpret_cast<decltype(n.throttle)>(dlsym(handle, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (!n.throttle) get(n.throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");  // its name before NVML 12.2
    if (!complete) {
      out.second = file + " lacks functions qvl reads (a driver older than NVML 10)";
    } else if (const NvmlReturn r = n.init(); r != 0) {
      out.second = std::string("NVML did not start: ") + n.error_string(r);
    } else {
      out.first = n;
    }
    return out;
  }();
  if (!loaded.first && reason) *reason = loaded.second;
  return loaded.first ? &*loaded.first : nullptr;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class NvmlVitals final : public GpuVitalsSource {
public:
  NvmlVitals(const Nvml& api, NvmlDevice device) : api_(api), device_(device) {
    char name[96] = {};
    if (api_.name(device_, name, sizeof name) == 0) name_ = name;
    unsigned mhz = 0;
    if (api_.max_clock(device_, kClockSm, &mhz) == 0) max_sm_mhz_ = mhz;
  }
  GpuVitals sample() override {
    GpuVitals v;
    v.seconds = seconds_since(t0_);
    v.max_sm_clock_mhz = max_sm_mhz_;
    check(api_.clock(device_, kClockSm, &v.sm_clock_mhz), "the SM clock");
    check(api_.clock(device_, kClockMemory, &v.memory_clock_mhz), "the memory clock");
    check(api_.temperature(device_, kTemperatureGpu, &v.temperature_c), "the temperature");
    unsigned milliwatts = 0;
    if (api_.power(device_, &milliwatts) == 0) v.power_w = milliwatts / 1e3;  // not every part reports power
    if (api_.power_limit(device_, &milliwatts) == 0) v.power_limit_w = milliwatts / 1e3;
    NvmlUtilization use{};
    v.busy_reported = check(api_.utilization(device_, &use), "how busy it is");
    v.busy_percent = use.gpu;
    unsigned long long reasons = 0;
    v.reasons_reported = check(api_.throttle(device_, &reasons), "why the clocks are held back");
    v.throttle_reasons = reasons;
    return v;
  }
  const std::string& device_name() const override { return name_; }

private:
  // False when the part does not report it (NVML_ERROR_NOT_SUPPORTED); throws for anything else.
  bool check(NvmlReturn r, const char* what) const {
    if (r == kNotSupported) return false;
    if (r != 0) fail("NVML could not read ", what, " of ", name_, ": ", api_.error_string(r));
    return true;
  }
  const Nvml& api_;
  NvmlDevice device_;
  std::string name_ = "the GPU";
  unsigned max_sm_mhz_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// A recording replayed in order, round and round.
class RecordedVitals final : public GpuVitalsSource {
public:
  explicit RecordedVitals(const std::string& path) {
    std::ifstream file(path);
    if (!file) fail(path, ": cannot open the GPU vitals recording");
    nlohmann::json j = nlohmann::json::parse(file, nullptr, false);
    if (j.is_object() && j.contains("gpu_vitals")) j = j["gpu_vitals"];  // a whole bench JSON
    if (!j.is_object() || !j.contains("samples") || !j["samples"].is_array() || j["samples"].empty())
      fail(path, ": not a GPU vitals recording (an object with \"device\" and a non-empty \"samples\" list)");
    name_ = j.value("device", std::string("recorded GPU")) + " (recorded)";
    for (const auto& s : j["samples"]) samples_.push_back(gpu_vitals_from_json(s));
  }
  GpuVitals sample() override { return samples_[next_++ % samples_.size()]; }
  const std::string& device_name() const override { return name_; }

private:
  std::string name_;
  std::vector<GpuVitals> samples_;
  size_t next_ = 0;
};

std::string nvml_uuid(const std::array<uint8_t, 16>& u) {
  char text[48];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return text;
}

}  // namespace

nlohmann::json to_json(const GpuVitals& v) {
  return {{"seconds", v.seconds},           {"sm_clock_mhz", v.sm_clock_mhz},
          {"max_sm_clock_mhz", v.max_sm_clock_mhz}, {"memory_clock_mhz", v.memory_clock_mhz},
          {"temperature_c", v.temperature_c}, {"power_w", v.power_w},
          {"power_limit_w", v.power_limit_w}, {"busy_percent", v.busy_percent},
          {"throttle_reasons", v.throttle_reasons}, {"busy_reported", v.busy_reported},
          {"reasons_reported", v.reasons_reported}};
}

GpuVitals gpu_vitals_from_json(const nlohmann::json& j) {
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(name) || !j[name].is_number())
      fail("GPU vitals sample: \"", name, "\" is missing or not a number");
    return j[name];
  };
  auto whole = [&](const char* name) -> const nlohmann::json& {  // counts: no sign, no fraction
    const nlohmann::json& f = field(name);
    if (!f.is_number_unsigned()) fail("GPU vitals sample: \"", name, "\" is not a whole number of 0 or more");
    return f;
  };
  GpuVitals v;
  v.seconds = field("seconds").get<double>();
  v.sm_clock_mhz = whole("sm_clock_mhz").get<unsigned>();
  v.max_sm_clock_mhz = whole("max_sm_clock_mhz").get<unsigned>();
  v.memory_clock_mhz = whole("memory_clock_mhz").get<unsigned>();
  v.temperature_c = whole("temperature_c").get<unsigned>();
  v.power_w = field("power_w").get<double>();
  v.power_limit_w = field("power_limit_w").get<double>();
  v.busy_percent = whole("busy_percent").get<unsigned>();
  v.throttle_reasons = whole("throttle_reasons").get<uint64_t>();
  v.busy_reported = j.value("busy_reported", true);
  v.reasons_reported = j.value("reasons_reported", true);
  return v;
}

std::vector<std::string> throttle_names(uint64_t reasons) {
  static const std::pair<uint64_t, const char*> kNames[] = {
      {0x1, "idle"},
      {0x2, "application clock setting"},
      {0x4, "power cap"},
      {0x8, "hardware slowdown"},
      {0x10, "sync boost"},
      {0x20, "thermal slowdown (software)"},
      {0x40, "thermal slowdown (hardware)"},
      {0x80, "power brake"},
      {0x100, "display clock setting"},
  };
  std::vector<std::string> names;
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (reasons & bit) names.push_back(name);
  }
  if (reasons & ~known) names.push_back("other");
  return names;
}


std::unique_ptr<GpuVitalsSource> open_gpu_vitals(const std::optional<std::array<uint8_t, 16>>& uuid, std::string* reason) {
  if (const char* recording = std::getenv("QVL_GPU_VITALS_RECORDING"); recording && *recording) {
    try {
      return std::make_unique<RecordedVitals>(recording);
    } catch (const std::exception& e) {
      if (reason) *reason = e.what();
      return nullptr;
    }
  }
  const Nvml* api = nvml(reason);
  if (!api) return nullptr;
  NvmlDevice device = nullptr;
  const bool found = uuid ? api->by_uuid(nvml_uuid(*uuid).c_str(), &device) == 0 : api->by_index(0, &device) == 0;
  if (!found) {
    if (reason) *reason = uuid ? "NVML has no device " + nvml_uuid(*uuid) : "NVML sees no GPU";
    return nullptr;
  }
  return std::make_unique<NvmlVitals>(*api, device);
}

GpuVitalsRecorder::GpuVitalsRecorder(GpuVitalsSource& source, int period_ms) : source_(source) {
  thread_ = std::thread([this, period_ms] {
    for (auto next = std::chrono::steady_clock::now(); !stopping_; next += std::chrono::milliseconds(period_ms)) {
      try {
        samples_.push_back(source_.sample());
      } catch (const std::exception& e) {
        error_ = e.what();
        return;
      }
      std::this_thread::sleep_until(next + std::chrono::milliseconds(period_ms));
    }
  });
}

GpuVitalsRecorder::~GpuVitalsRecorder() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<GpuVitals> GpuVitalsRecorder::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  if (!error_.empty()) fail(error_);
  return samples_;
}

nlohmann::json GpuVitalsRecorder::report(const std::string& device, const std::vector<GpuVitals>& samples) {
  nlohmann::json list = nlohmann::json::array();
  std::vector<double> clocks;
  unsigned hottest = 0;
  double most_power = 0, limit = 0;
  uint64_t seen = 0;
  for (const GpuVitals& v : samples) {
    list.push_back(to_json(v));
    clocks.push_back(v.sm_clock_mhz);
    hottest = std::max(hottest, v.temperature_c);
    most_power = std::max(most_power, v.power_w);
    limit = std::max(limit, v.power_limit_w);
    seen |= v.throttle_reasons;
  }
  std::sort(clocks.begin(), clocks.end());
  nlohmann::json summary = nlohmann::json::object();
  if (!clocks.empty())
    summary = {{"sm_clock_mhz_min", clocks.front()},   {"sm_clock_mhz_median", clocks[clocks.size() / 2]},
               {"sm_clock_mhz_max", clocks.back()},    {"max_sm_clock_mhz", samples.front().max_sm_clock_mhz},
               {"temperature_c_max", hottest},         {"power_w_max", most_power},
               {"power_limit_w", limit},               {"throttle_reasons_seen", throttle_names(seen)},
               {"throttled", throttles_work(seen)}};
  return {{"device", device}, {"samples", list}, {"summary", summary}};
}

}  // namespace qvl
