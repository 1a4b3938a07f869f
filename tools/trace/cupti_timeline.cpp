// A development tool, not part of the product: the GPU's kernel timeline of any CUDA program, for finding where a
// phase waits on the host and what each kernel really takes (Nsight Systems is not installed on the GPU machine;
// Nsight Compute times each kernel alone). Preloaded, it records every kernel's start and end with CUPTI's activity
// API and writes them at exit, one line a kernel: "start_ns end_ns stream name", in start order. Written against
// CUDA 13.0's CUPTI (CUpti_ActivityKernel10), the GPU machine's; the records still queued when the process exits are
// flushed in the library's destructor. With QVL_TIMELINE_HOST set as well, the host's CUDA runtime and driver calls
// are recorded too (their start and end on the same clock, the thread, and the correlation id that ties a launch to
// its kernel), for finding how much of a phase's queueing is the calls themselves and how much the engine between
// them. Lines: "K start_ns end_ns stream correlation name" for kernels, "A start_ns end_ns thread correlation name"
// for calls.
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include tools/trace/cupti_timeline.cpp \
//       -L/usr/local/cuda/lib -L/usr/local/cuda/lib64 -lcupti -o /tmp/libcupti_timeline.so
//   QVL_TIMELINE=/tmp/timeline.txt LD_PRELOAD=/tmp/libcupti_timeline.so build/.../qvl bench ...
//   python3 tools/trace/timeline_summary.py /tmp/timeline.txt
// Under `timeout`, preload through `env` (timeout 90 env QVL_TIMELINE=... LD_PRELOAD=... qvl ...): preloaded into
// timeout itself, the library writes its own empty timeline over the program's when timeout exits.
#include <cupti.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
  char kind;  // 'K' a kernel, 'A' a host call
  uint64_t start, end;
  uint32_t where;  // the kernel's stream, the call's thread
  uint32_t correlation;
  std::string name;
};

std::mutex g_mutex;
std::vector<Record> g_records;
bool g_enabled = false;

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      g_records.push_back({'K', k->start, k->end, k->streamId, k->correlationId, k->name ? k->name : "?"});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME || record->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
      const auto* c = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const char* name = nullptr;
      cuptiGetCallbackName(record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                                        : CUPTI_CB_DOMAIN_DRIVER_API,
                           c->cbid, &name);
      g_records.push_back({'A', c->start, c->end, c->threadId, c->correlationId, name ? name : "?"});
    }
  }
  std::free(buffer);
}

__attribute__((constructor)) void start() {
  if (!std::getenv("QVL_TIMELINE")) return;
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_timeline: CUPTI would not start\n");
    return;
  }
  if (std::getenv("QVL_TIMELINE_HOST") && (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS ||
                                            cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS))
    std::fprintf(stderr, "cupti_timeline: no host call records\n");
  g_enabled = true;
}

__attribute__((destructor)) void finish() {
  if (!g_enabled) return;
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::sort(g_records.begin(), g_records.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  FILE* f = std::fopen(std::getenv("QVL_TIMELINE"), "w");
  if (!f) return;
  for (const Record& r : g_records)
    std::fprintf(f, "%c %llu %llu %u %u %s\n", r.kind, (unsigned long long)r.start, (unsigned long long)r.end, r.where,
                 r.correlation, r.name.c_str());
  std::fclose(f);
}

}  // namespace
