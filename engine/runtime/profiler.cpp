#include "runtime/profiler.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

namespace qvl {

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, std::size_t(q * double(v.size() - 1) + 0.5))];
}

Profiler::Profiler() : origin_ns_(steady_ns()) {}

double Profiler::now_ms() const { return double(steady_ns() - origin_ns_) / 1e6; }

void Profiler::record(KernelEvent event) {
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(event));
}

std::vector<KernelSummary> Profiler::summary() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::vector<const KernelEvent*>> by_name;
  double all_ms = 0;
  for (const auto& e : events_) {
    by_name[e.name].push_back(&e);
    all_ms += e.duration_ms;
  }
  std::vector<KernelSummary> out;
  for (const auto& [name, list] : by_name) {
    KernelSummary s;
    s.name = name;
    s.calls = int64_t(list.size());
    std::vector<double> us;
    for (const auto* e : list) {
      s.total_ms += e->duration_ms;
      s.bytes += e->bytes;
      s.flops += e->flops;
      us.push_back(e->duration_ms * 1e3);
    }
    s.mean_us = s.total_ms * 1e3 / double(s.calls);
    s.p50_us = percentile(us, 0.5);
    s.p95_us = percentile(us, 0.95);
    if (s.total_ms > 0) {
      s.gb_per_s = s.bytes / (s.total_ms * 1e-3) / 1e9;
      s.tflop_per_s = s.flops / (s.total_ms * 1e-3) / 1e12;
    }
    s.share = all_ms > 0 ? s.total_ms / all_ms : 0;
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::vector<KernelEvent> Profiler::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

std::string Profiler::chrome_trace() const {
  nlohmann::json trace = nlohmann::json::array();
  for (const auto& e : events())
    trace.push_back({{"name", e.name}, {"ph", "X"}, {"ts", e.start_ms * 1e3}, {"dur", e.duration_ms * 1e3},
                     {"pid", 1}, {"tid", 1}, {"args", {{"bytes", e.bytes}, {"flops", e.flops}}}});
  return nlohmann::json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump();
}

void Profiler::clear() {
  std::lock_guard lock(mutex_);
  events_.clear();
}

void Profiler::add_listener(Listener listener) {
  std::lock_guard lock(mutex_);
  listeners_.push_back(std::move(listener));
}

void Profiler::publish() const {
  std::vector<Listener> listeners;
  {
    std::lock_guard lock(mutex_);
    listeners = listeners_;
  }
  if (listeners.empty()) return;
  const auto table = summary();
  for (const auto& l : listeners) l(table);
}

}  // namespace qvl
