// The block timeline's buffer and its file (block_timeline.cuh). Without -DQVL_BLOCK_TIMELINE=ON, nothing.
#include "block_timeline.cuh"

#ifdef QVL_BLOCK_TIMELINE
#include <cstdio>
#include <cstdlib>
#include <vector>
#endif

namespace qvl::cuda {

#ifdef QVL_BLOCK_TIMELINE
namespace {
std::vector<void (*)(BlockStamp*, unsigned long long*)>& setters() {
  static std::vector<void (*)(BlockStamp*, unsigned long long*)> all;
  return all;
}
BlockStamp* g_stamps = nullptr;
unsigned long long* g_count = nullptr;

void write_timeline() {
  unsigned long long count = 0;
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(&count, g_count, sizeof count, cudaMemcpyDeviceToHost) != cudaSuccess)
    return;
  const unsigned long long kept = count < kBlockStamps ? count : kBlockStamps;  // the ring's slots in use
  std::vector<BlockStamp> stamps(kept);
  if (cudaMemcpy(stamps.data(), g_stamps, sizeof(BlockStamp) * kept, cudaMemcpyDeviceToHost) != cudaSuccess) return;
  FILE* f = std::fopen(std::getenv("QVL_BLOCK_TIMELINE"), "w");
  if (!f) return;
  for (unsigned long long i = count - kept; i != count; ++i) {  // oldest first, in the order the slots were taken
    const BlockStamp& s = stamps[i % kBlockStamps];
    std::fprintf(f, "%llu %llu %u %u %u %u %u %u\n", s.time_ns, s.grid_id, s.grid_x, s.grid_y, s.threads, s.what, s.sm,
                 s.block);
  }
  std::fclose(f);
}
}  // namespace

void block_timeline_register(void (*set)(BlockStamp*, unsigned long long*)) { setters().push_back(set); }

void block_timeline_start() {
  if (!std::getenv("QVL_BLOCK_TIMELINE") || g_stamps) return;
  if (cudaMalloc(&g_stamps, sizeof(BlockStamp) * kBlockStamps) != cudaSuccess ||
      cudaMalloc(&g_count, sizeof *g_count) != cudaSuccess || cudaMemset(g_count, 0, sizeof *g_count) != cudaSuccess) {
    std::fprintf(stderr, "block timeline: no device memory for it\n");
    return;
  }
  for (auto set : setters()) set(g_stamps, g_count);
  std::fprintf(stderr, "block timeline: %zu translation units stamp into %s\n", setters().size(),
               std::getenv("QVL_BLOCK_TIMELINE"));
  std::atexit(write_timeline);
}
void block_timeline_pause(bool paused, cudaStream_t stream) {
  if (!g_stamps) return;
  cudaStreamSynchronize(stream);  // the kernels queued before the switch stamp (or not) as they were launched to
  for (auto set : setters()) set(paused ? nullptr : g_stamps, g_count);
}
#else
void block_timeline_start() {}
void block_timeline_pause(bool, cudaStream_t) {}
#endif

}  // namespace qvl::cuda
